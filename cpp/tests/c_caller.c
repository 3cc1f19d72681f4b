/* What a C caller can do and C++ cannot without undefined behaviour: store any int in the C
 * API's enum fields and arguments (C enums are ints). The tests store values no enumerator
 * has through these, and the library must read them as integers. Compiled as C, this also
 * checks that rmsnorm.h is a C header. */
#include "c_caller.h"

const char* c_status_string(int status) { return rmsnorm_status_string((rmsnorm_status)status); }

void c_store_dtype(rmsnorm_dtype* field, int value) { *field = (rmsnorm_dtype)value; }

void c_store_casting_mode(rmsnorm_casting_mode* field, int value) {
    *field = (rmsnorm_casting_mode)value;
}

void c_store_accumulation(rmsnorm_accumulation* field, int value) {
    *field = (rmsnorm_accumulation)value;
}

void c_store_quant_format(rmsnorm_quant_format* field, int value) {
    *field = (rmsnorm_quant_format)value;
}

void c_store_scale_mode(rmsnorm_scale_mode* field, int value) {
    *field = (rmsnorm_scale_mode)value;
}
