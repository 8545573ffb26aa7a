#pragma once
// The one error type of wmap: a code from a small closed set plus a message that names the file,
// the key, the offset and the expected vs actual values. Thread-safe (immutable once thrown).

#include <stdexcept>
#include <string>
#include <string_view>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

enum class ErrorCode {
  // Usage and environment.
  kInvalidArgument,  // bad option, bad layout, bad environment variable
  kNotFound,         // missing file, directory, tensor
  kIo,               // open/read/write/mmap failed
  // Malformed input (safetensors format, index.json, config.json, YAML, catalog JSON).
  kHeaderTooSmall,       // file shorter than the 8-byte length prefix
  kHeaderTooLarge,       // header length over the format's limit
  kInvalidHeaderLength,  // header length runs past the end of the file
  kInvalidHeaderUtf8,    // header is not UTF-8
  kInvalidHeaderJson,    // header is not a JSON object of the expected shape
  kInvalidTensorInfo,    // unknown dtype, bad shape, byte length != elements x dtype size
  kInvalidOffset,        // offsets not contiguous from 0, overlapping, or reversed
  kOverflow,             // a shape product or an offset overflows 64 bits
  kDataSizeMismatch,     // the data does not end exactly at the end of the file
  kDuplicateTensor,      // one name twice in a header or in two shards
  kMalformedInput,       // any other malformed input (index.json, config.json, catalog, YAML)
  // Semantic failures of a well-formed input.
  kValidation,   // plan validation / load failed
  kUnsupported,  // well-formed but not supported
  kOutOfMemory,  // host or device memory could not be allocated
  kInternal,     // a bug in wmap
  kCancelled,    // the caller cancelled the work (Ctrl-C in Python: KeyboardInterrupt)
};

std::string_view error_code_name(ErrorCode code);

// Exit code of the CLI for an error: 2 for bad usage or malformed/unreadable input, 130 for a
// cancelled command (as a shell reports SIGINT), 1 otherwise.
int exit_code_for(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Formats `path: message` consistently; errno-based I/O errors name the file and the syscall.
[[noreturn]] void throw_errno(const std::string& file, std::string_view what, int err);

}  // namespace wmap
WMAP_PUBLIC_END
