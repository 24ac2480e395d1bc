// Token file writer and memory-mapped reader; the format is in token_file.hpp.
#include "data/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace ftrain::data {

namespace {

// Training reads ids into i32 tensors, so no vocabulary may exceed 2^31.
constexpr std::uint64_t kMaxVocab = std::uint64_t{1} << 31;

void put_u32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t get_u32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void encode_header(const TokenFileHeader& h, unsigned char* out) {
  std::memset(out, 0, kTokenFileHeaderBytes);
  std::memcpy(out, kTokenFileMagic, 8);
  put_u32(out + 8, h.version);
  put_u32(out + 12, h.token_bytes);
  put_u64(out + 16, h.n_tokens);
  put_u64(out + 24, h.vocab_size);
  put_u64(out + 32, h.eos_id);
  put_u64(out + 40, h.n_documents);
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::uint32_t token_bytes_for_vocab(std::uint64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// ---- writer -------------------------------------------------------------------

TokenFileWriter::TokenFileWriter(std::string path, std::uint64_t vocab_size, std::uint64_t eos_id,
                                 std::uint32_t token_bytes)
    : path_(std::move(path)), temp_path_(path_ + ".tmp") {
  if (token_bytes == 0) token_bytes = token_bytes_for_vocab(vocab_size);
  if (token_bytes != 2 && token_bytes != 4)
    FT_USER_ERROR() << "token file " << path_ << ": token size must be 2 or 4 bytes, not " << token_bytes;
  if (vocab_size == 0 || vocab_size > kMaxVocab)
    FT_USER_ERROR() << "token file " << path_ << ": vocabulary size must be in [1, 2^31], not " << vocab_size;
  if (token_bytes == 2 && vocab_size > 65536)
    FT_USER_ERROR() << "token file " << path_ << ": vocabulary size " << vocab_size
                    << " needs 4-byte tokens (2-byte tokens hold at most 65536 ids)";
  if (eos_id != kNoEosId && eos_id >= vocab_size)
    FT_USER_ERROR() << "token file " << path_ << ": eos id " << eos_id << " is not below the vocabulary size "
                    << vocab_size;
  header_.token_bytes = token_bytes;
  header_.vocab_size = vocab_size;
  header_.eos_id = eos_id;
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (file_ == nullptr) FT_USER_ERROR() << "cannot create token file " << temp_path_ << ": " << errno_text();
  // Placeholder header; close() rewrites it once the counts are known.
  unsigned char zeros[kTokenFileHeaderBytes] = {};
  if (std::fwrite(zeros, 1, sizeof zeros, file_) != sizeof zeros) {
    const std::string why = errno_text();
    std::fclose(file_);
    file_ = nullptr;
    std::remove(temp_path_.c_str());
    FT_USER_ERROR() << "cannot write token file " << temp_path_ << ": " << why;
  }
  buffer_.reserve(1 << 20);
}

TokenFileWriter::~TokenFileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void TokenFileWriter::flush_buffer() {
  if (buffer_.empty()) return;
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
    FT_USER_ERROR() << "cannot write token file " << temp_path_ << ": " << errno_text();
  buffer_.clear();
}

void TokenFileWriter::put(std::uint32_t token) {
  unsigned char bytes[4];
  put_u32(bytes, token);
  buffer_.insert(buffer_.end(), bytes, bytes + header_.token_bytes);
  if (buffer_.size() >= (1u << 20)) flush_buffer();
  ++header_.n_tokens;
}

void TokenFileWriter::append_document(std::span<const std::uint32_t> tokens) {
  FT_CHECK(file_ != nullptr) << "token file " << path_ << " is already closed";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::uint32_t t = tokens[i];
    if (t >= header_.vocab_size)
      FT_USER_ERROR() << "token file " << path_ << ": document " << header_.n_documents << " token " << i
                      << " has id " << t << ", not below the vocabulary size " << header_.vocab_size;
    if (t == header_.eos_id)
      FT_USER_ERROR() << "token file " << path_ << ": document " << header_.n_documents << " token " << i
                      << " is the eos id " << t << " (the writer appends eos itself)";
    put(t);
  }
  if (header_.has_eos()) put(static_cast<std::uint32_t>(header_.eos_id));
  ++header_.n_documents;
}

void TokenFileWriter::close() {
  FT_CHECK(file_ != nullptr) << "token file " << path_ << " is already closed";
  flush_buffer();
  unsigned char header[kTokenFileHeaderBytes];
  encode_header(header_, header);
  bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header, 1, sizeof header, file_) == sizeof header &&
            std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const std::string why = errno_text();
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    std::remove(temp_path_.c_str());
    FT_USER_ERROR() << "cannot write token file " << temp_path_ << ": " << why;
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string rename_why = errno_text();
    std::remove(temp_path_.c_str());
    FT_USER_ERROR() << "cannot rename " << temp_path_ << " to " << path_ << ": " << rename_why;
  }
}

// ---- reader -------------------------------------------------------------------

TokenFile::TokenFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) FT_USER_ERROR() << "cannot open token file " << path_ << ": " << errno_text();
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    FT_USER_ERROR() << "cannot stat token file " << path_ << ": " << why;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    FT_USER_ERROR() << "token file " << path_ << " is not a regular file";
  }
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes < kTokenFileHeaderBytes) {
    ::close(fd);
    FT_USER_ERROR() << "token file " << path_ << " is truncated: " << file_bytes
                    << " bytes, shorter than the 64-byte header";
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_why = errno_text();
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) FT_USER_ERROR() << "cannot map token file " << path_ << ": " << map_why;
  map_ = static_cast<const unsigned char*>(map);
  map_bytes_ = file_bytes;
  tokens_ = map_ + kTokenFileHeaderBytes;

  // From here on a throw must unmap: the destructor does not run for a
  // constructor that throws.
  try {
    if (std::memcmp(map_, kTokenFileMagic, 8) != 0)
      FT_USER_ERROR() << "token file " << path_ << " has the wrong magic (expected \"FTRNTOK1\"): not an ftrain "
                      << "token file";
    header_.version = get_u32(map_ + 8);
    header_.token_bytes = get_u32(map_ + 12);
    header_.n_tokens = get_u64(map_ + 16);
    header_.vocab_size = get_u64(map_ + 24);
    header_.eos_id = get_u64(map_ + 32);
    header_.n_documents = get_u64(map_ + 40);
    if (header_.version != kTokenFileVersion)
      FT_USER_ERROR() << "token file " << path_ << " has format version " << header_.version
                      << "; this ftrain reads version " << kTokenFileVersion;
    if (header_.token_bytes != 2 && header_.token_bytes != 4)
      FT_USER_ERROR() << "token file " << path_ << " declares " << header_.token_bytes
                      << "-byte tokens; only 2 and 4 are valid";
    if (header_.vocab_size == 0 || header_.vocab_size > kMaxVocab)
      FT_USER_ERROR() << "token file " << path_ << " declares vocabulary size " << header_.vocab_size
                      << "; it must be in [1, 2^31]";
    if (header_.token_bytes == 2 && header_.vocab_size > 65536)
      FT_USER_ERROR() << "token file " << path_ << " declares vocabulary size " << header_.vocab_size
                      << " with 2-byte tokens, which hold at most 65536 ids";
    if (header_.has_eos() && header_.eos_id >= header_.vocab_size)
      FT_USER_ERROR() << "token file " << path_ << " declares eos id " << header_.eos_id
                      << ", not below its vocabulary size " << header_.vocab_size;
    const std::uint64_t payload = file_bytes - kTokenFileHeaderBytes;
    if (header_.n_tokens > payload / header_.token_bytes)
      FT_USER_ERROR() << "token file " << path_ << " is truncated: the header declares " << header_.n_tokens
                      << " tokens of " << header_.token_bytes << " bytes but only " << payload
                      << " bytes follow the header";
    if (payload != header_.n_tokens * header_.token_bytes)
      FT_USER_ERROR() << "token file " << path_ << " has " << payload - header_.n_tokens * header_.token_bytes
                      << " bytes of trailing data after its " << header_.n_tokens << " tokens";
    for (std::size_t i = 48; i < kTokenFileHeaderBytes; ++i)
      if (map_[i] != 0)
        FT_USER_ERROR() << "token file " << path_ << " has non-zero reserved header bytes (offset " << i
                        << "): written by a newer or different tool";
    if (header_.n_tokens <= kEagerValidationTokens) validate_all();
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    throw;
  }
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

std::uint32_t TokenFile::raw_token(std::int64_t i) const {
  const unsigned char* p = tokens_ + static_cast<std::size_t>(i) * header_.token_bytes;
  return header_.token_bytes == 2 ? static_cast<std::uint32_t>(p[0] | (p[1] << 8)) : get_u32(p);
}

void TokenFile::read(std::int64_t first, std::int64_t count, std::int32_t* dst) const {
  FT_CHECK(first >= 0 && count >= 0 && first + count <= n_tokens())
      << "token range [" << first << ", " << first + count << ") outside " << path_ << " (" << n_tokens()
      << " tokens)";
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint32_t t = raw_token(first + i);
    if (t >= header_.vocab_size)
      FT_USER_ERROR() << "token file " << path_ << ": token " << first + i << " has id " << t
                      << ", not below the vocabulary size " << header_.vocab_size << " (corrupt file?)";
    dst[i] = static_cast<std::int32_t>(t);
  }
}

void TokenFile::validate_all() const {
  std::uint64_t eos_count = 0;
  for (std::int64_t i = 0; i < n_tokens(); ++i) {
    const std::uint32_t t = raw_token(i);
    if (t >= header_.vocab_size)
      FT_USER_ERROR() << "token file " << path_ << ": token " << i << " has id " << t
                      << ", not below the vocabulary size " << header_.vocab_size << " (corrupt file?)";
    eos_count += (t == header_.eos_id);
  }
  if (header_.has_eos() && eos_count != header_.n_documents)
    FT_USER_ERROR() << "token file " << path_ << " declares " << header_.n_documents << " documents but holds "
                    << eos_count << " eos tokens (id " << header_.eos_id << "); each document must end with one";
}

}  // namespace ftrain::data
