// A restricted pickle interpreter for torch.save state dicts: it builds plain data (dicts,
// tuples, ints, strings) and tensor references, and nothing else. Globals are checked against an
// allowlist when they are named; the only "calls" are the allowlisted torch rebuild functions and
// OrderedDict(), which are interpreted here as data constructors. Nothing is imported, called or
// evaluated. Every value lives in an arena owned by the interpreter, so reference cycles built by
// a hostile pickle (a dict put into itself through the memo) cannot leak or recurse.
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_map>

#include "wmap/util/error.h"
#include "wmap/format/torch_checkpoint.h"

namespace wmap {
namespace {

constexpr size_t kMaxStack = 1u << 20;  // values on the stack
constexpr size_t kMaxMarks = 1u << 16;  // nested MARKs
constexpr size_t kMaxMemo = 1u << 24;   // memo entries
constexpr size_t kMaxGlobalName = 256;  // "module\nname\n" line length
constexpr size_t kMaxDims = 64;         // tensor rank

struct Value {
  enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  Kind kind = Kind::kNone;
  DType dtype = DType::kU8;   // storage types (kGlobal) and storages
  int64_t i = 0;              // int, bool, tensor index into Interpreter::tensors_, storage numel
  std::string s;              // string, global "module.name", storage key
  std::vector<Value*> items;  // tuple/list items; dict: key, value, key, value, ...
};

std::string_view kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kTuple: return "tuple";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kGlobal: return "global";
    case Value::Kind::kStorage: return "storage";
    case Value::Kind::kTensor: return "tensor";
  }
  return "?";
}

// The storage classes torch.save names in persistent ids, and their element types.
std::optional<DType> storage_dtype(std::string_view qualified) {
  static const std::pair<std::string_view, DType> kTypes[] = {
      {"torch.BFloat16Storage", DType::kBF16}, {"torch.HalfStorage", DType::kF16}, {"torch.FloatStorage", DType::kF32},
      {"torch.DoubleStorage", DType::kF64},    {"torch.LongStorage", DType::kI64}, {"torch.IntStorage", DType::kI32},
      {"torch.ShortStorage", DType::kI16},     {"torch.CharStorage", DType::kI8},  {"torch.ByteStorage", DType::kU8},
      {"torch.BoolStorage", DType::kBOOL},
  };
  for (const auto& [name, dtype] : kTypes) {
    if (name == qualified) return dtype;
  }
  return std::nullopt;
}

constexpr std::string_view kOrderedDict = "collections.OrderedDict";
constexpr std::string_view kRebuildTensorV2 = "torch._utils._rebuild_tensor_v2";
constexpr std::string_view kRebuildParameter = "torch._utils._rebuild_parameter";

bool allowed_global(std::string_view q) {
  return q == kOrderedDict || q == kRebuildTensorV2 || q == kRebuildParameter || storage_dtype(q).has_value();
}

class Interpreter {
 public:
  Interpreter(std::span<const std::byte> data, const std::string& label)
      : p_(reinterpret_cast<const unsigned char*>(data.data())), n_(data.size()), label_(label) {}

  std::vector<TorchTensorRef> run();

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(ErrorCode::kMalformedInput, label_ + ": data.pkl at byte " + std::to_string(op_pos_) + ": " + msg);
  }
  const unsigned char* take(size_t len) {
    if (n_ - pos_ < len)
      fail("truncated (needs " + std::to_string(len) + " more bytes, " + std::to_string(n_ - pos_) + " left)");
    const unsigned char* at = p_ + pos_;
    pos_ += len;
    return at;
  }
  uint64_t take_le(size_t len) {
    const unsigned char* b = take(len);
    uint64_t v = 0;
    for (size_t k = 0; k < len; ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
    return v;
  }
  std::string take_line() {
    const size_t limit = std::min(n_ - pos_, kMaxGlobalName);
    const void* nl = std::memchr(p_ + pos_, '\n', limit);
    if (!nl)
      fail("GLOBAL name is not a newline-terminated line of at most " + std::to_string(kMaxGlobalName) + " bytes");
    const size_t len = static_cast<size_t>(static_cast<const unsigned char*>(nl) - (p_ + pos_));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len + 1;
    return s;
  }
  Value* make(Value::Kind kind) {
    Value& v = arena_.emplace_back();
    v.kind = kind;
    return &v;
  }
  void push(Value* v) {
    if (stack_.size() >= kMaxStack) fail("stack deeper than " + std::to_string(kMaxStack));
    stack_.push_back(v);
  }
  Value* pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops everything above the last MARK, and the MARK.
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  void memo_put(uint64_t key) {
    Value* v = top();
    auto it = memo_.find(key);
    if (it != memo_.end()) {
      it->second = v;
      return;
    }
    if (memo_.size() >= kMaxMemo) fail("memo larger than " + std::to_string(kMaxMemo) + " entries");
    memo_.emplace(key, v);
  }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " was never stored");
    push(it->second);
  }
  void global(const std::string& module, const std::string& name) {
    const std::string q = module + "." + name;
    if (!allowed_global(q)) {
      throw Error(ErrorCode::kMalformedInput,
                  label_ + ": data.pkl refers to the global '" + q +
                      "', which is not allowed in a weights-only "
                      "checkpoint (only collections.OrderedDict, torch._utils._rebuild_tensor_v2, "
                      "torch._utils._rebuild_parameter and torch.*Storage types); nothing was executed");
    }
    Value* v = make(Value::Kind::kGlobal);
    v->s = q;
    if (auto d = storage_dtype(q)) v->dtype = *d;
    push(v);
  }
  void set_items(Value* dict, const std::vector<Value*>& kv) {
    if (dict->kind != Value::Kind::kDict)
      fail("SETITEM(S) on a " + std::string(kind_name(dict->kind)) + ", not a dict");
    if (kv.size() % 2) fail("SETITEMS with an odd number of items");
    dict->items.insert(dict->items.end(), kv.begin(), kv.end());
  }
  int64_t as_int(const Value* v, const char* what) {
    if (v->kind != Value::Kind::kInt)
      fail(std::string(what) + " is a " + std::string(kind_name(v->kind)) + ", not an int");
    return v->i;
  }
  Value* persistent_load(Value* pid);
  Value* reduce(Value* callable, Value* args);

  const unsigned char* p_;
  size_t n_;
  size_t pos_ = 0, op_pos_ = 0;
  const std::string& label_;
  std::deque<Value> arena_;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value*> memo_;
  std::vector<TorchTensorRef> tensors_;
};

Value* Interpreter::persistent_load(Value* pid) {
  // ('storage', <storage type>, key, location, numel)
  if (pid->kind != Value::Kind::kTuple || pid->items.size() != 5 || pid->items[0]->kind != Value::Kind::kString ||
      pid->items[0]->s != "storage") {
    fail("persistent id is not ('storage', type, key, location, numel)");
  }
  const Value* type = pid->items[1];
  if (type->kind != Value::Kind::kGlobal || !storage_dtype(type->s)) fail("persistent id names no torch storage type");
  if (pid->items[2]->kind != Value::Kind::kString) fail("storage key is not a string");
  if (pid->items[3]->kind != Value::Kind::kString) fail("storage location is not a string");
  const int64_t numel = as_int(pid->items[4], "storage size");
  if (numel < 0) fail("storage size is negative");
  Value* s = make(Value::Kind::kStorage);
  s->dtype = type->dtype;
  s->s = pid->items[2]->s;
  s->i = numel;
  return s;
}

Value* Interpreter::reduce(Value* callable, Value* args) {
  if (callable->kind != Value::Kind::kGlobal)
    fail("REDUCE of a " + std::string(kind_name(callable->kind)) + ", not an allowed callable");
  if (args->kind != Value::Kind::kTuple)
    fail("REDUCE arguments are a " + std::string(kind_name(args->kind)) + ", not a tuple");
  const auto& a = args->items;
  if (callable->s == kOrderedDict) {
    if (!a.empty()) fail("collections.OrderedDict called with arguments");
    return make(Value::Kind::kDict);
  }
  if (callable->s == kRebuildParameter) {
    // (tensor, requires_grad, backward_hooks)
    if (a.size() != 3 || a[0]->kind != Value::Kind::kTensor)
      fail("torch._utils._rebuild_parameter expects (tensor, requires_grad, hooks)");
    return a[0];
  }
  if (callable->s == kRebuildTensorV2) {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (a.size() != 6 && a.size() != 7)
      fail("torch._utils._rebuild_tensor_v2 expects 6 or 7 arguments, got " + std::to_string(a.size()));
    if (a[0]->kind != Value::Kind::kStorage) fail("tensor storage is a " + std::string(kind_name(a[0]->kind)));
    const int64_t offset = as_int(a[1], "storage offset");
    if (offset < 0) fail("storage offset is negative");
    if (a[2]->kind != Value::Kind::kTuple || a[3]->kind != Value::Kind::kTuple)
      fail("tensor size and stride must be tuples");
    if (a[2]->items.size() != a[3]->items.size()) fail("tensor size and stride differ in length");
    if (a[2]->items.size() > kMaxDims) fail("tensor has more than " + std::to_string(kMaxDims) + " dimensions");
    TorchTensorRef t;
    t.dtype = a[0]->dtype;
    t.storage_key = a[0]->s;
    t.storage_numel = static_cast<uint64_t>(a[0]->i);
    t.storage_offset = static_cast<uint64_t>(offset);
    for (size_t d = 0; d < a[2]->items.size(); ++d) {
      const int64_t size = as_int(a[2]->items[d], "tensor size");
      if (size < 0) fail("tensor size is negative");
      t.shape.push_back(static_cast<uint64_t>(size));
      t.strides.push_back(as_int(a[3]->items[d], "tensor stride"));
    }
    Value* v = make(Value::Kind::kTensor);
    v->i = static_cast<int64_t>(tensors_.size());
    tensors_.push_back(std::move(t));
    return v;
  }
  fail("REDUCE of '" + callable->s + "' is not allowed");
}

std::vector<TorchTensorRef> Interpreter::run() {
  Value* none = make(Value::Kind::kNone);
  for (;;) {
    op_pos_ = pos_;
    const unsigned char op = *take(1);
    switch (op) {
      case 0x80:  // PROTO
        if (*take(1) > 5) fail("pickle protocol above 5");
        break;
      case 0x95:  // FRAME (protocol 4): a length hint only
        take(8);
        break;
      case '}': push(make(Value::Kind::kDict)); break;   // EMPTY_DICT
      case ']': push(make(Value::Kind::kList)); break;   // EMPTY_LIST
      case ')': push(make(Value::Kind::kTuple)); break;  // EMPTY_TUPLE
      case '(':                                          // MARK
        if (marks_.size() >= kMaxMarks) fail("MARKs nested deeper than " + std::to_string(kMaxMarks));
        marks_.push_back(stack_.size());
        break;
      case 'X':
      case 0x8c:
      case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
        const uint64_t len = take_le(op == 'X' ? 4 : op == 0x8c ? 1 : 8);
        if (len > n_ - pos_)
          fail("string of " + std::to_string(len) + " bytes runs past the end (" + std::to_string(n_ - pos_) +
               " left)");
        Value* v = make(Value::Kind::kString);
        v->s.assign(reinterpret_cast<const char*>(take(static_cast<size_t>(len))), static_cast<size_t>(len));
        push(v);
        break;
      }
      case 'J': {  // BININT: 4-byte signed
        Value* v = make(Value::Kind::kInt);
        v->i = static_cast<int32_t>(static_cast<uint32_t>(take_le(4)));
        push(v);
        break;
      }
      case 'K':
      case 'M': {  // BININT1, BININT2: unsigned
        Value* v = make(Value::Kind::kInt);
        v->i = static_cast<int64_t>(take_le(op == 'K' ? 1 : 2));
        push(v);
        break;
      }
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const size_t len = *take(1);
        if (len > 8) fail("LONG1 of " + std::to_string(len) + " bytes does not fit 64 bits");
        uint64_t u = take_le(len);
        if (len > 0 && len < 8 && (u >> (8 * len - 1)) & 1) u |= ~uint64_t{0} << (8 * len);
        Value* v = make(Value::Kind::kInt);
        v->i = static_cast<int64_t>(u);
        push(v);
        break;
      }
      case 'G': {  // BINFLOAT: 8-byte big-endian double (kept only as a placeholder)
        take(8);
        push(make(Value::Kind::kFloat));
        break;
      }
      case 'N': push(none); break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        Value* v = make(Value::Kind::kBool);
        v->i = op == 0x88;
        push(v);
        break;
      }
      case 't': {  // TUPLE
        Value* v = make(Value::Kind::kTuple);
        v->items = pop_mark();
        push(v);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const size_t k = op - 0x84u;
        if (stack_.size() - floor() < k) fail("stack underflow");
        Value* v = make(Value::Kind::kTuple);
        v->items.assign(stack_.end() - static_cast<ptrdiff_t>(k), stack_.end());
        stack_.resize(stack_.size() - k);
        push(v);
        break;
      }
      case 'q': memo_put(take_le(1)); break;     // BINPUT
      case 'r': memo_put(take_le(4)); break;     // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
      case 'h': memo_get(take_le(1)); break;     // BINGET
      case 'j': memo_get(take_le(4)); break;     // LONG_BINGET
      case 'c': {                                // GLOBAL
        const std::string module = take_line();
        const std::string name = take_line();
        global(module, name);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Value* name = pop();
        Value* module = pop();
        if (module->kind != Value::Kind::kString || name->kind != Value::Kind::kString)
          fail("STACK_GLOBAL of non-strings");
        if (module->s.size() > kMaxGlobalName || name->s.size() > kMaxGlobalName) fail("STACK_GLOBAL name too long");
        global(module->s, name->s);
        break;
      }
      case 'Q': push(persistent_load(pop())); break;  // BINPERSID
      case 'R': {                                     // REDUCE
        Value* args = pop();
        Value* callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 's': {  // SETITEM
        Value* value = pop();
        Value* key = pop();
        set_items(top(), {key, value});
        break;
      }
      case 'u': {  // SETITEMS
        const std::vector<Value*> kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case 'a': {  // APPEND
        Value* value = pop();
        Value* list = top();
        if (list->kind != Value::Kind::kList) fail("APPEND to a " + std::string(kind_name(list->kind)));
        list->items.push_back(value);
        break;
      }
      case 'e': {  // APPENDS
        const std::vector<Value*> items = pop_mark();
        Value* list = top();
        if (list->kind != Value::Kind::kList) fail("APPENDS to a " + std::string(kind_name(list->kind)));
        list->items.insert(list->items.end(), items.begin(), items.end());
        break;
      }
      case 'b': {  // BUILD: only an OrderedDict's __dict__ (state_dict()._metadata), which is dropped
        pop();
        Value* obj = top();
        if (obj->kind != Value::Kind::kDict)
          fail("BUILD on a " + std::string(kind_name(obj->kind)) + " is not allowed");
        break;
      }
      case '.': {  // STOP
        if (!marks_.empty()) fail("STOP with an open MARK");
        Value* result = pop();
        if (result->kind != Value::Kind::kDict) {
          throw Error(ErrorCode::kMalformedInput, label_ + ": not a state dict: data.pkl holds a " +
                                                      std::string(kind_name(result->kind)) + ", not a dict of tensors");
        }
        std::vector<TorchTensorRef> out;
        std::unordered_map<std::string, size_t> seen;
        for (size_t k = 0; k + 1 < result->items.size(); k += 2) {
          const Value* key = result->items[k];
          const Value* val = result->items[k + 1];
          if (key->kind != Value::Kind::kString) {
            throw Error(ErrorCode::kMalformedInput, label_ + ": not a state dict: a key is a " +
                                                        std::string(kind_name(key->kind)) + ", not a string");
          }
          if (val->kind != Value::Kind::kTensor) {
            throw Error(ErrorCode::kMalformedInput, label_ + ": not a state dict: '" + key->s + "' is a " +
                                                        std::string(kind_name(val->kind)) + ", not a tensor");
          }
          TorchTensorRef t = tensors_[static_cast<size_t>(val->i)];
          t.name = key->s;
          auto [it, fresh] = seen.emplace(t.name, out.size());
          if (fresh) {
            out.push_back(std::move(t));
          } else {
            out[it->second] = std::move(t);  // a later assignment of the same key wins, as in Python
          }
        }
        return out;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        fail(std::string("pickle opcode ") + hex + " is not supported in a weights-only checkpoint");
      }
    }
  }
}

}  // namespace

std::vector<TorchTensorRef> parse_torch_pickle(std::span<const std::byte> pickle, const std::string& label) {
  Interpreter interp(pickle, label);
  return interp.run();
}

}  // namespace wmap
