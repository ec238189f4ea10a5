// ExceptionStatus: see exception_status.h.
#include "runtime/engine/exception_status.h"

#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace slidedp {
namespace {

absl::Status FromMessage(absl::string_view what, const std::string& message) {
  const bool allocation = absl::StrContains(message, "out of memory") ||
                          absl::StrContains(message, "tried to allocate") ||
                          absl::StrContains(message, "not enough memory");
  if (allocation) return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory: ", message));
  return absl::InternalError(absl::StrCat(what, ": ", message));
}

}  // namespace

std::string ExceptionMessage(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string message = torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
  message = message.substr(0, message.find('\n'));
  if (message.size() > 512) {
    // Cut before a UTF-8 sequence, never inside one (a status's message is text).
    size_t cut = 512;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
    message = message.substr(0, cut) + "...";
  }
  return message;
}

absl::Status CurrentExceptionStatus(absl::string_view what) {
  try {
    throw;
  } catch (const StatusException& e) {
    return absl::Status(e.status().code(), absl::StrCat(what, ": ", e.status().message()));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of host memory (", e.what(), ")"));
  } catch (const std::exception& e) {
    return FromMessage(what, ExceptionMessage(e));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": an unknown exception"));
  }
}

}  // namespace slidedp
