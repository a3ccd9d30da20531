/*
 * graph_runtime/base.h -- what every header of byoc's shared graph runtime builds on: the tvm-ffi names they use,
 * the name of the runtime a shared library holds, and Fail, the error every runtime raises.
 *
 * Everything in codegens/graph_runtime/ is inline or a template: each runtime library (json_runtime, dnnl) is
 * built with hidden visibility and keeps its own copy (docs/design.md, "Graph runtimes share one header").
 */
#ifndef BYOC_GRAPH_RUNTIME_BASE_H_
#define BYOC_GRAPH_RUNTIME_BASE_H_

#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <string>

namespace byoc {
namespace graph_runtime {

using tvm::ffi::Any;
using tvm::ffi::Array;
using tvm::ffi::Bytes;
using tvm::ffi::Function;
using tvm::ffi::Map;
using tvm::ffi::Module;
using tvm::ffi::ModuleObj;
using tvm::ffi::Object;
using tvm::ffi::ObjectPtr;
using tvm::ffi::Optional;
using tvm::ffi::PackedArgs;
using tvm::ffi::String;

// The runtime whose errors are being raised ("json_runtime", "dnnl"); set by
// each shared library, which holds exactly one runtime.
extern const char* const kRuntimeName;

[[noreturn]] inline void Fail(const std::string& what) {
  TVM_FFI_THROW(ValueError) << "byoc " << kRuntimeName << ": " << what;
  TVM_FFI_UNREACHABLE();
}

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_BASE_H_
