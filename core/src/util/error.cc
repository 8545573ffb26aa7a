#include "wmap/util/error.h"

#include <cstring>

namespace wmap {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kIo: return "Io";
    case ErrorCode::kHeaderTooSmall: return "HeaderTooSmall";
    case ErrorCode::kHeaderTooLarge: return "HeaderTooLarge";
    case ErrorCode::kInvalidHeaderLength: return "InvalidHeaderLength";
    case ErrorCode::kInvalidHeaderUtf8: return "InvalidHeaderUtf8";
    case ErrorCode::kInvalidHeaderJson: return "InvalidHeaderJson";
    case ErrorCode::kInvalidTensorInfo: return "InvalidTensorInfo";
    case ErrorCode::kInvalidOffset: return "InvalidOffset";
    case ErrorCode::kOverflow: return "Overflow";
    case ErrorCode::kDataSizeMismatch: return "DataSizeMismatch";
    case ErrorCode::kDuplicateTensor: return "DuplicateTensor";
    case ErrorCode::kMalformedInput: return "MalformedInput";
    case ErrorCode::kValidation: return "Validation";
    case ErrorCode::kUnsupported: return "Unsupported";
    case ErrorCode::kOutOfMemory: return "OutOfMemory";
    case ErrorCode::kInternal: return "Internal";
    case ErrorCode::kCancelled: return "Cancelled";
  }
  return "Unknown";
}

int exit_code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kValidation:
    case ErrorCode::kUnsupported:
    case ErrorCode::kOutOfMemory:
    case ErrorCode::kInternal: return 1;
    case ErrorCode::kCancelled: return 130;
    default: return 2;
  }
}

void throw_errno(const std::string& file, std::string_view what, int err) {
  const ErrorCode code = (err == ENOENT || err == ENOTDIR) ? ErrorCode::kNotFound : ErrorCode::kIo;
  throw Error(code, file + ": " + std::string(what) + " failed: " + std::strerror(err));
}

}  // namespace wmap
