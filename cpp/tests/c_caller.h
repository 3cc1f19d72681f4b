/* c_caller.c: the C side of the tests (any int in an enum field). */
#ifndef RMSNORM_TESTS_C_CALLER_H
#define RMSNORM_TESTS_C_CALLER_H

#include "rmsnorm/rmsnorm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* rmsnorm_status_string of an int. */
const char* c_status_string(int status);
/* *field = value, as C stores it. */
void c_store_dtype(rmsnorm_dtype* field, int value);
void c_store_casting_mode(rmsnorm_casting_mode* field, int value);
void c_store_accumulation(rmsnorm_accumulation* field, int value);
void c_store_quant_format(rmsnorm_quant_format* field, int value);
void c_store_scale_mode(rmsnorm_scale_mode* field, int value);

#ifdef __cplusplus
}
#endif

#endif /* RMSNORM_TESTS_C_CALLER_H */
