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
void c_store_normalized_sum(rmsnorm_normalized_sum* field, int value);
void c_store_quantizer(rmsnorm_quantizer* field, int value);
/* The size of a first-version (v1) struct as a caller compiled against rmsnorm.h's first
 * version sees it: the struct up to its last v1 member, padded. */
size_t c_forward_args_v1_size(void);
size_t c_quant_args_v1_size(void);

#ifdef __cplusplus
}
#endif

#endif /* RMSNORM_TESTS_C_CALLER_H */
