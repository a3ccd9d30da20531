/* The fixed part of every standalone byoc program (see byoc/deploy/standalone/c_program.py):
 * the runtime symbols TVM's kernels and C-source partitions call, and the tensor-file reader and writer. It follows
 * byoc/vendor/byoc_abi.h, which defines the argument types and type indices. */

/* An ffi.Shape as a C-source partition reads one (the dims TVM passes next to its tensors): the
 * 24-byte object header, then the values' pointer and count. */
typedef struct { unsigned char header[24]; const int64_t* data; uint64_t size; } byoc_shape_object;

static byoc_any byoc_result;

static void byoc_set_tensor(byoc_any* a, byoc_dltensor* t, void* data, int64_t* shape, int ndim,
                            int code, int bits) {
  t->data = data; t->device.device_type = 1; t->device.device_id = 0; t->ndim = ndim;
  t->dtype.code = (uint8_t)code; t->dtype.bits = (uint8_t)bits; t->dtype.lanes = 1;
  t->shape = shape; t->strides = NULL; t->byte_offset = 0;
  a->type_index = BYOC_FFI_DLTENSOR_PTR; a->zero_padding = 0; a->v.v_ptr = t;
}
static void byoc_set_shape(byoc_any* a, byoc_shape_object* s, const int64_t* data, uint64_t size) {
  memset(s->header, 0, sizeof(s->header)); s->data = data; s->size = size;
  a->type_index = BYOC_FFI_SHAPE; a->zero_padding = 0; a->v.v_ptr = s;
}
static void byoc_set_int(byoc_any* a, int64_t v) { a->type_index = BYOC_FFI_INT; a->zero_padding = 0; a->v.v_int64 = v; }
static void byoc_set_float(byoc_any* a, double v) { a->type_index = BYOC_FFI_FLOAT; a->zero_padding = 0; a->v.v_float64 = v; }

/* Runtime symbols the TVM-generated kernels and the C-source partitions use. */
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t n) {
  int32_t i;
  fprintf(stderr, "%s: ", kind);
  for (i = 0; i < n; ++i) fputs(parts[i], stderr);
  fputc('\n', stderr);
}
/* Workspaces: 64-byte aligned malloc; the original pointer is kept just before the block. */
static void* byoc_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code, int bits) {
  unsigned char* raw = (unsigned char*)malloc((size_t)nbytes + 64 + sizeof(void*));
  uintptr_t aligned;
  (void)device_type; (void)device_id; (void)code; (void)bits;
  if (raw == NULL) return NULL;
  aligned = ((uintptr_t)(raw + sizeof(void*)) + 63u) & ~(uintptr_t)63u;
  ((void**)aligned)[-1] = raw;
  return (void*)aligned;
}
static int byoc_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type; (void)device_id;
  if (ptr != NULL) free(((void**)ptr)[-1]);
  return 0;
}
typedef struct { void* sync_handle; int32_t num_task; } byoc_parallel_env;
typedef int (*byoc_parallel_lambda)(int task_id, byoc_parallel_env* env, void* cdata);
/* Serial parallel-launch: one task does all the work. */
static int byoc_parallel_launch(byoc_parallel_lambda f, void* cdata, int num_task) {
  byoc_parallel_env env;
  (void)num_task;
  env.sync_handle = NULL; env.num_task = 1;
  return f(0, &env, cdata);
}
static int byoc_parallel_barrier(int task_id, byoc_parallel_env* env) { (void)task_id; (void)env; return 0; }
/* The kernels hold weak, empty pointers of these names; these definitions win at link time. */
void* (*__TVMBackendAllocWorkspace)(int, int, uint64_t, int, int) = byoc_alloc_workspace;
int (*__TVMBackendFreeWorkspace)(int, int, void*) = byoc_free_workspace;
int (*__TVMBackendParallelLaunch)(byoc_parallel_lambda, void*, int) = byoc_parallel_launch;
int (*__TVMBackendParallelBarrier)(int, byoc_parallel_env*) = byoc_parallel_barrier;

static int byoc_kernel_failed(const char* name) {
  fprintf(stderr, "byoc: kernel %s failed\n", name);
  return 1;
}

/* ---- tensor files: see the format at the top of this file ---- */
typedef struct { int code, bits, ndim; const int64_t* shape; void* data; } byoc_io;

static int byoc_read_le(FILE* f, int nbytes, uint64_t* out) {
  unsigned char b[8];
  int i;
  if (fread(b, 1, (size_t)nbytes, f) != (size_t)nbytes) return 0;
  *out = 0;
  for (i = nbytes - 1; i >= 0; --i) *out = (*out << 8) | b[i];
  return 1;
}
static int byoc_write_le(FILE* f, int nbytes, uint64_t v) {
  unsigned char b[8];
  int i;
  for (i = 0; i < nbytes; ++i) { b[i] = (unsigned char)(v & 0xffu); v >>= 8; }
  return fwrite(b, 1, (size_t)nbytes, f) == (size_t)nbytes;
}
/* One element between its little-endian file form and native memory, by value. */
static void byoc_store(void* dst, int nbytes, uint64_t v) {
  if (nbytes == 1) { uint8_t x = (uint8_t)v; memcpy(dst, &x, 1); }
  else if (nbytes == 2) { uint16_t x = (uint16_t)v; memcpy(dst, &x, 2); }
  else if (nbytes == 4) { uint32_t x = (uint32_t)v; memcpy(dst, &x, 4); }
  else { memcpy(dst, &v, 8); }
}
static uint64_t byoc_load(const void* src, int nbytes) {
  if (nbytes == 1) { uint8_t x; memcpy(&x, src, 1); return x; }
  if (nbytes == 2) { uint16_t x; memcpy(&x, src, 2); return x; }
  if (nbytes == 4) { uint32_t x; memcpy(&x, src, 4); return x; }
  { uint64_t x; memcpy(&x, src, 8); return x; }
}
static int64_t byoc_numel(const byoc_io* t) {
  int64_t n = 1;
  int d;
  for (d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}
static int byoc_read_inputs(const char* path, const byoc_io* ts, int count) {
  FILE* f = fopen(path, "rb");
  char magic[8];
  uint64_t v;
  int i, d;
  int64_t k;
  if (f == NULL) { fprintf(stderr, "byoc: cannot open %s\n", path); return 0; }
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "BYOCTNS1", 8) != 0) {
    fprintf(stderr, "byoc: %s is not a byoc tensor file\n", path); fclose(f); return 0;
  }
  if (!byoc_read_le(f, 4, &v) || (int)v != count) {
    fprintf(stderr, "byoc: %s must hold %d tensors\n", path, count); fclose(f); return 0;
  }
  for (i = 0; i < count; ++i) {
    const byoc_io* t = &ts[i];
    int size = t->bits / 8;
    uint64_t code, bits, ndim, dim;
    if (!byoc_read_le(f, 4, &code) || !byoc_read_le(f, 4, &bits) || !byoc_read_le(f, 4, &ndim) ||
        (int)code != t->code || (int)bits != t->bits || (int)ndim != t->ndim) {
      fprintf(stderr, "byoc: input %d has the wrong dtype or rank\n", i); fclose(f); return 0;
    }
    for (d = 0; d < t->ndim; ++d) {
      if (!byoc_read_le(f, 8, &dim) || (int64_t)dim != t->shape[d]) {
        fprintf(stderr, "byoc: input %d has the wrong shape\n", i); fclose(f); return 0;
      }
    }
    for (k = 0; k < byoc_numel(t); ++k) {
      if (!byoc_read_le(f, size, &v)) { fprintf(stderr, "byoc: input %d is truncated\n", i); fclose(f); return 0; }
      byoc_store((unsigned char*)t->data + k * size, size, v);
    }
  }
  fclose(f);
  return 1;
}
static int byoc_write_outputs(const char* path, const byoc_io* ts, int count) {
  FILE* f = fopen(path, "wb");
  int i, d, ok;
  int64_t k;
  if (f == NULL) { fprintf(stderr, "byoc: cannot create %s\n", path); return 0; }
  ok = fwrite("BYOCTNS1", 1, 8, f) == 8 && byoc_write_le(f, 4, (uint64_t)count);
  for (i = 0; ok && i < count; ++i) {
    const byoc_io* t = &ts[i];
    int size = t->bits / 8;
    ok = byoc_write_le(f, 4, (uint64_t)t->code) && byoc_write_le(f, 4, (uint64_t)t->bits) &&
         byoc_write_le(f, 4, (uint64_t)t->ndim);
    for (d = 0; ok && d < t->ndim; ++d) ok = byoc_write_le(f, 8, (uint64_t)t->shape[d]);
    for (k = 0; ok && k < byoc_numel(t); ++k)
      ok = byoc_write_le(f, size, byoc_load((const unsigned char*)t->data + k * size, size));
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "byoc: cannot write %s\n", path);
  return ok;
}
