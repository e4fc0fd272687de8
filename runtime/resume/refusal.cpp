#include "resume/refusal.h"

#include <cxxabi.h>

#include <cstdlib>
#include <exception>
#include <memory>
#include <typeinfo>

#include "slurmddp/error.h"

namespace slurmddp::resume {

namespace {

std::string type_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), &std::free);
  return status == 0 && name ? name.get() : t.name();
}

}  // namespace

std::string refusal_of(const std::function<void()>& read, int rank, const std::string& what) {
  const std::string prefix = "checkpoint: rank " + std::to_string(rank) + " failed to read " + what;
  try {
    read();
  } catch (const Error& e) {
    return *e.what() != '\0' ? e.what() : prefix + ": an error without a message";
  } catch (const std::exception& e) {
    return prefix + ": " + e.what() + " (" + type_name(typeid(e)) + ")";
  } catch (...) {
    return prefix + ": an exception of an unknown type";
  }
  return "";
}

}  // namespace slurmddp::resume
