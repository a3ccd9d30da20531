/* byoc_abi.h -- the entry point of a partition, as byoc's host program calls it (tvm-ffi's safe-call ABI).
 *
 * For each partition a codegen exports one C function named after the partition's symbol:
 *
 *     int __tvm_ffi_<symbol>(void* self, const byoc_any* args, int32_t num_args, byoc_any* result);
 *
 * declared extern "C" when compiled as C++ (export_library compiles C source as C++). It is called in
 * destination-passing style: args holds the partition's inputs in PartitionGraph.inputs order, then one
 * preallocated output tensor per result (PartitionGraph.outputs), and a shape at each position that
 * PartitionGraph.shape_arguments names. It writes the outputs, leaves `result` alone and returns 0; on an error
 * it calls TVMFFIErrorSetRaisedFromCStrParts (byoc_fail does) and returns -1.
 *
 * An argument is a byoc_any whose type_index says what it holds:
 *   BYOC_FFI_DLTENSOR_PTR  v.v_ptr is a DLTensor*                      (a tensor from the host program)
 *   BYOC_FFI_TENSOR        v.v_ptr is an ffi.Tensor object; its DLTensor follows the 24-byte object header
 *   BYOC_FFI_SHAPE         v.v_ptr is an ffi.Shape object: the header, then int64_t* data and uint64_t size
 *   BYOC_FFI_INT, _FLOAT   v.v_int64, v.v_float64
 * byoc_tensor() reads both tensor forms; byoc_arg() also checks the dtype, rank, shape and layout a partition
 * expects. Tensors are on the CPU (device_type 1), row-major; a size-1 dim may carry any stride.
 *
 * The layouts are DLPack's and tvm-ffi's (tvm/ffi/c_api.h, dlpack.h), which are ABI-stable: they are declared
 * here, so that the C needs no include path (a cross compiler has none). Every helper is static inline.
 * Write this file beside your C with byoc.vendor.abi.write_abi_header(folder), or paste abi_header().
 */
#ifndef BYOC_ABI_H_
#define BYOC_ABI_H_

#include <stddef.h>
#include <stdint.h>

typedef struct { int32_t device_type; int32_t device_id; } byoc_device;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } byoc_dtype;  /* DLPack: code 0 int, 1 uint, 2 float */
typedef struct {
  void* data; byoc_device device; int32_t ndim; byoc_dtype dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
} byoc_dltensor;
typedef struct {
  int32_t type_index; uint32_t zero_padding;
  union { int64_t v_int64; double v_float64; void* v_ptr; } v;
} byoc_any;

#define BYOC_FFI_INT 1
#define BYOC_FFI_FLOAT 3
#define BYOC_FFI_DLTENSOR_PTR 7
#define BYOC_FFI_SHAPE 69
#define BYOC_FFI_TENSOR 70
#define BYOC_FFI_OBJECT_HEADER 24 /* sizeof(TVMFFIObject) on every 64-bit target */

#ifdef __cplusplus
extern "C" {
#endif
/* Raises an error of `kind` ("TypeError", "ValueError", "MemoryError", ...) whose message is the n parts
 * joined; defined by the TVM runtime, and by byoc's standalone programs. */
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t n);
#ifdef __cplusplus
}
#endif

/* Raises "<symbol>: <what>" as an error of `kind`; returns -1, what the entry point returns then. */
static inline int byoc_fail(const char* kind, const char* symbol, const char* what) {
  const char* parts[3];
  parts[0] = symbol; parts[1] = ": "; parts[2] = what;
  TVMFFIErrorSetRaisedFromCStrParts(kind, parts, 3);
  return -1;
}

/* Argument `i` as a DLTensor, or NULL when it is none. */
static inline const byoc_dltensor* byoc_tensor(const byoc_any* args, int i) {
  if (args[i].type_index == BYOC_FFI_DLTENSOR_PTR) return (const byoc_dltensor*)args[i].v.v_ptr;
  if (args[i].type_index == BYOC_FFI_TENSOR) {
    return (const byoc_dltensor*)((const char*)args[i].v.v_ptr + BYOC_FFI_OBJECT_HEADER);
  }
  return NULL;
}

/* Dim `axis` of argument `i`, once byoc_arg has checked it. */
static inline int64_t byoc_dim(const byoc_any* args, int i, int axis) { return byoc_tensor(args, i)->shape[axis]; }

/* Value `k` of shape argument `i`, or -1 when argument `i` is no shape that long. */
static inline int64_t byoc_shape_value(const byoc_any* args, int i, int k) {
  const char* cell;
  if (args[i].type_index != BYOC_FFI_SHAPE) return -1;
  cell = (const char*)args[i].v.v_ptr + BYOC_FFI_OBJECT_HEADER;
  if (*(const uint64_t*)(cell + sizeof(void*)) <= (uint64_t)k) return -1;
  return (*(const int64_t* const*)cell)[k];
}

/* The data of argument `i`, checked against the expected DLPack type (code, bits), rank and shape, on the CPU
   and contiguous; a dim of -1 in `shape` is symbolic, for the caller to check once it knows the call's dims.
   On a mismatch it raises the error, sets *error to -1 and returns NULL. */
static inline void* byoc_arg(const byoc_any* args, int i, const int64_t* shape, int ndim, int code, int bits,
                             const char* symbol, int* error) {
  const byoc_dltensor* t = byoc_tensor(args, i);
  int d;
  int64_t expect = 1;
  if (t == NULL) { *error = byoc_fail("TypeError", symbol, "an argument is not a tensor"); return NULL; }
  if (t->device.device_type != 1) { *error = byoc_fail("ValueError", symbol, "a tensor is not on the CPU"); return NULL; }
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) {
    *error = byoc_fail("TypeError", symbol, "a tensor has the wrong dtype"); return NULL;
  }
  if (t->ndim != ndim) { *error = byoc_fail("ValueError", symbol, "a tensor has the wrong rank"); return NULL; }
  for (d = ndim - 1; d >= 0; --d) {
    if (shape[d] >= 0 && t->shape[d] != shape[d]) {
      *error = byoc_fail("ValueError", symbol, "a tensor has the wrong shape"); return NULL;
    }
    if (t->strides != NULL && t->shape[d] != 1 && t->strides[d] != expect) {
      *error = byoc_fail("ValueError", symbol, "a tensor is not contiguous"); return NULL;
    }
    expect *= t->shape[d];
  }
  return (char*)t->data + t->byte_offset;
}

#endif /* BYOC_ABI_H_ */
