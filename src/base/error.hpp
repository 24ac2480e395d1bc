// Error handling for ftrain: one exception type that always carries context.
//
// Three layers (see share/doc/design-decisions.md):
//  * internal invariants: FT_CHECK(cond) << "tensor " << name << ...; throws
//    ftrain::Error with file:line and function;
//  * user input errors (deck, files): ftrain::UserError, reported once on
//    rank 0 by the app, naming the deck file:line or the file at fault;
//  * library calls (MPI, HDF5, CUDA) go through their own check macros that
//    build on FT_CHECK.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ftrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user (deck, data file, weights file). The message is
// complete on its own and names the file (and line, where there is one).
class UserError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// Collects a message with operator<< and throws when destroyed. Used only
// through FT_CHECK / FT_THROW so that the message is built lazily.
template <class E>
class Thrower {
 public:
  Thrower(const char* file, int line, const char* func, const char* cond) {
    stream_ << file << ":" << line << " (" << func << "): ";
    if (cond != nullptr) stream_ << "check failed: " << cond << ": ";
  }
  Thrower(const Thrower&) = delete;
  Thrower& operator=(const Thrower&) = delete;
  template <class T>
  Thrower& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  [[noreturn]] ~Thrower() noexcept(false) { throw E(stream_.str()); }

 private:
  std::ostringstream stream_;
};

// Same as Thrower, without the source location: user errors must read as
// plain sentences about the user's input, not about our source files.
class UserThrower {
 public:
  UserThrower() = default;
  UserThrower(const UserThrower&) = delete;
  UserThrower& operator=(const UserThrower&) = delete;
  template <class T>
  UserThrower& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  [[noreturn]] ~UserThrower() noexcept(false) { throw UserError(stream_.str()); }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace ftrain

#define FT_CHECK(cond)                                                                    \
  if (cond) {                                                                             \
  } else                                                                                  \
    ::ftrain::detail::Thrower<::ftrain::Error>(__FILE__, __LINE__, __func__, #cond)

#define FT_THROW() ::ftrain::detail::Thrower<::ftrain::Error>(__FILE__, __LINE__, __func__, nullptr)

// Throws ftrain::UserError; the message must name the file/line itself.
#define FT_USER_ERROR() ::ftrain::detail::UserThrower()
