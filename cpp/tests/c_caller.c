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

void c_store_normalized_sum(rmsnorm_normalized_sum* field, int value) {
    *field = (rmsnorm_normalized_sum)value;
}

void c_store_quantizer(rmsnorm_quantizer* field, int value) {
    *field = (rmsnorm_quantizer)value;
}

/* rmsnorm.h's first version of each struct, as its callers compiled it. */
typedef struct forward_args_v1 {
    size_t struct_size;
    int64_t rows;
    int64_t n;
    rmsnorm_rows x, residual, residual_out;
    const void* weight;
    rmsnorm_dtype weight_dtype;
    rmsnorm_rows y;
    float* rstd;
    float eps;
    float offset;
    rmsnorm_casting_mode casting_mode;
    rmsnorm_accumulation accumulation;
    unsigned launch_flags;
} forward_args_v1;

typedef struct quant_args_v1 {
    size_t struct_size;
    const rmsnorm_forward_args* forward;
    void* out;
    int64_t out_stride;
    rmsnorm_quant_format format;
    rmsnorm_scale_mode scale_mode;
    int64_t group_size;
    float* scales;
    int64_t scale_row_stride;
    int64_t scale_group_stride;
    const float* scale_ub;
    int ue8m0;
} quant_args_v1;

size_t c_forward_args_v1_size(void) { return sizeof(forward_args_v1); }
size_t c_quant_args_v1_size(void) { return sizeof(quant_args_v1); }
