/*
 * graph_runtime/json.h -- access to a parsed graph JSON whose every error says where the graph is wrong
 * ("node #3 (dnnl.conv2d_bias) body[1] relax.add attribute \"axis\" must be an integer"): typed fields,
 * and Attrs, an op's typed attributes ({"type": "int[]", "value": [1, 1]}).
 */
#ifndef BYOC_GRAPH_RUNTIME_JSON_H_
#define BYOC_GRAPH_RUNTIME_JSON_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base.h"

namespace byoc {
namespace graph_runtime {

constexpr int kMaxJsonDepth = 64;  // the schema nests 5 deep; refuse pathological input

using JObject = Map<Any, Any>;
using JArray = Array<Any>;

inline void CheckJsonDepth(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) Fail("graph JSON nests deeper than the schema allows");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

inline JObject AsObject(const Any& v, const std::string& where) {
  auto o = v.try_cast<JObject>();
  if (!o.has_value()) Fail(where + " must be a JSON object");
  return *o;
}

inline JArray AsArray(const Any& v, const std::string& where) {
  auto a = v.try_cast<JArray>();
  if (!a.has_value()) Fail(where + " must be a JSON array");
  return *a;
}

inline Any Field(const JObject& o, const char* key, const std::string& where) {
  auto it = o.find(Any(String(key)));
  if (it == o.end()) Fail(where + " has no field \"" + key + "\"");
  return (*it).second;
}

inline std::string AsString(const Any& v, const std::string& where) {
  auto s = v.as<String>();
  if (!s.has_value()) Fail(where + " must be a string");
  return std::string(*s);
}

inline int64_t AsInt(const Any& v, const std::string& where) {
  if (v.as<bool>().has_value()) Fail(where + " must be an integer, not a boolean");
  auto i = v.as<int64_t>();
  if (!i.has_value()) Fail(where + " must be an integer");
  return *i;
}

inline double AsFloat(const Any& v, const std::string& where) {
  if (auto d = v.as<double>()) return *d;
  if (auto i = v.as<int64_t>()) return static_cast<double>(*i);
  if (auto s = v.as<String>()) {
    // Non-finite floats are spelled as strings to keep the JSON strict.
    std::string t(*s);
    if (t == "inf") return INFINITY;
    if (t == "-inf") return -INFINITY;
    if (t == "nan") return NAN;
  }
  Fail(where + " must be a number (or \"inf\", \"-inf\", \"nan\")");
}

inline std::vector<int64_t> AsInts(const Any& v, const std::string& where) {
  std::vector<int64_t> out;
  JArray a = AsArray(v, where);
  for (size_t i = 0; i < a.size(); ++i) out.push_back(AsInt(a[i], where + "[" + std::to_string(i) + "]"));
  return out;
}


// A typed attribute: {"type": "int[]", "value": [1, 1]}.
class Attrs {
 public:
  Attrs(JObject attrs, std::string where) : attrs_(std::move(attrs)), where_(std::move(where)) {}

  bool Has(const char* key) const { return attrs_.find(Any(String(key))) != attrs_.end(); }
  bool IsNone(const char* key) const { return Type(key) == "none"; }
  bool IsInts(const char* key) const { return Type(key) == "int[]"; }
  int64_t Int(const char* key) const { return AsInt(Value(key, "int"), Where(key)); }
  bool Bool(const char* key) const {
    auto b = Value(key, "bool").as<bool>();
    if (!b.has_value()) Fail(Where(key) + " must be true or false");
    return *b;
  }
  // An integer is a float too: TVM keeps integral bounds (clip's min/max) as IntImm.
  double Float(const char* key) const {
    return AsFloat(Value(key, Type(key) == "int" ? "int" : "float"), Where(key));
  }
  std::string Str(const char* key) const { return AsString(Value(key, "str"), Where(key)); }
  std::vector<int64_t> Ints(const char* key) const { return AsInts(Value(key, "int[]"), Where(key)); }
  std::vector<double> Floats(const char* key) const {
    JArray items = AsArray(Value(key, "float[]"), Where(key));
    std::vector<double> out;
    for (size_t i = 0; i < items.size(); ++i) out.push_back(AsFloat(items[i], Where(key)));
    return out;
  }

 private:
  std::string Where(const char* key) const { return where_ + " attribute \"" + key + "\""; }
  std::string Type(const char* key) const {
    JObject a = AsObject(Field(attrs_, key, where_ + " attrs"), Where(key));
    return AsString(Field(a, "type", Where(key)), Where(key) + " type");
  }
  Any Value(const char* key, const char* type) const {
    JObject a = AsObject(Field(attrs_, key, where_ + " attrs"), Where(key));
    std::string t = AsString(Field(a, "type", Where(key)), Where(key) + " type");
    if (t != type) Fail(Where(key) + " has type " + t + ", expected " + type);
    return Field(a, "value", Where(key));
  }

  JObject attrs_;
  std::string where_;
};

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_JSON_H_
