// Token file writer and memory-mapped reader; the format is in token_file.hpp.
#include "data/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"

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

std::uint64_t round_up8(std::uint64_t n) { return (n + 7) / 8 * 8; }

// Section sizes and offsets of a version 2 file (token_file.hpp).
struct MaskedLayout {
  std::uint64_t mask_offset, mask_bytes, index_offset, index_bytes, file_bytes;
};
MaskedLayout masked_layout(std::uint64_t n_tokens, std::uint32_t token_bytes, std::uint64_t n_documents) {
  MaskedLayout l{};
  l.mask_offset = round_up8(kTokenFileHeaderBytes + n_tokens * token_bytes);
  l.mask_bytes = (n_tokens + 7) / 8;
  l.index_offset = round_up8(l.mask_offset + l.mask_bytes);
  l.index_bytes = (n_documents + 1) * 8;
  l.file_bytes = l.index_offset + l.index_bytes;
  return l;
}

}  // namespace

std::uint32_t token_bytes_for_vocab(std::uint64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// ---- writer -------------------------------------------------------------------

TokenFileWriter::TokenFileWriter(std::string path, std::uint64_t vocab_size, std::uint64_t eos_id,
                                 std::uint32_t token_bytes, TokenFileLayout layout)
    : path_(std::move(path)), temp_path_(path_ + ".tmp"), layout_(layout) {
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
  header_.version = layout == TokenFileLayout::masked ? kMaskedTokenFileVersion : kPlainTokenFileVersion;
  if (layout == TokenFileLayout::masked) document_offsets_.push_back(0);
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

void TokenFileWriter::put(std::uint32_t token, bool trained) {
  unsigned char bytes[4];
  put_u32(bytes, token);
  buffer_.insert(buffer_.end(), bytes, bytes + header_.token_bytes);
  if (buffer_.size() >= (1u << 20)) flush_buffer();
  if (layout_ == TokenFileLayout::masked) {
    const std::uint64_t i = header_.n_tokens;
    if (i % 8 == 0) mask_bits_.push_back(0);
    if (trained) mask_bits_.back() = static_cast<std::uint8_t>(mask_bits_.back() | (1u << (i % 8)));
  }
  ++header_.n_tokens;
}

void TokenFileWriter::check_token(std::size_t i, std::uint32_t t, bool eos_allowed) const {
  if (t >= header_.vocab_size)
    FT_USER_ERROR() << "token file " << path_ << ": document " << header_.n_documents << " token " << i
                    << " has id " << t << ", not below the vocabulary size " << header_.vocab_size;
  if (!eos_allowed && t == header_.eos_id)
    FT_USER_ERROR() << "token file " << path_ << ": document " << header_.n_documents << " token " << i
                    << " is the eos id " << t << " (the writer appends eos itself)";
}

void TokenFileWriter::append_document(std::span<const std::uint32_t> tokens) {
  FT_CHECK(file_ != nullptr) << "token file " << path_ << " is already closed";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    check_token(i, tokens[i], false);
    put(tokens[i], true);
  }
  if (header_.has_eos()) put(static_cast<std::uint32_t>(header_.eos_id), true);
  ++header_.n_documents;
  if (layout_ == TokenFileLayout::masked) document_offsets_.push_back(header_.n_tokens);
}

void TokenFileWriter::append_document(std::span<const std::uint32_t> tokens, std::span<const std::uint8_t> trained) {
  FT_CHECK(file_ != nullptr) << "token file " << path_ << " is already closed";
  FT_CHECK(layout_ == TokenFileLayout::masked)
      << "token file " << path_ << ": a loss mask needs a masked (version 2) writer";
  FT_CHECK(trained.size() == tokens.size())
      << "token file " << path_ << ": document " << header_.n_documents << " has " << tokens.size()
      << " tokens but " << trained.size() << " mask entries";
  if (tokens.empty() && !header_.has_eos())
    FT_USER_ERROR() << "token file " << path_ << ": document " << header_.n_documents
                    << " is empty (a file without eos cannot hold empty documents)";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    check_token(i, tokens[i], true);
    put(tokens[i], trained[i] != 0);
  }
  if (header_.has_eos()) put(static_cast<std::uint32_t>(header_.eos_id), true);
  ++header_.n_documents;
  document_offsets_.push_back(header_.n_tokens);
}

void TokenFileWriter::write_zeros(std::size_t n) {
  buffer_.insert(buffer_.end(), n, 0);
}

void TokenFileWriter::close() {
  FT_CHECK(file_ != nullptr) << "token file " << path_ << " is already closed";
  if (layout_ == TokenFileLayout::masked) {
    // The sections after the tokens (token_file.hpp): mask, then index.
    const MaskedLayout l = masked_layout(header_.n_tokens, header_.token_bytes, header_.n_documents);
    write_zeros(l.mask_offset - (kTokenFileHeaderBytes + header_.n_tokens * header_.token_bytes));
    buffer_.insert(buffer_.end(), mask_bits_.begin(), mask_bits_.end());
    write_zeros(l.index_offset - (l.mask_offset + l.mask_bytes));
    for (const std::uint64_t offset : document_offsets_) {
      unsigned char bytes[8];
      put_u64(bytes, offset);
      buffer_.insert(buffer_.end(), bytes, bytes + 8);
      if (buffer_.size() >= (1u << 20)) flush_buffer();
    }
  }
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
    if (header_.version != kPlainTokenFileVersion && header_.version != kMaskedTokenFileVersion)
      FT_USER_ERROR() << "token file " << path_ << " has format version " << header_.version
                      << "; this ftrain reads versions " << kPlainTokenFileVersion << " and " << kMaskedTokenFileVersion;
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
    if (header_.has_loss_mask()) {
      // n_documents is bounded by the file size before it sizes anything.
      if (header_.n_documents > file_bytes / 8)
        FT_USER_ERROR() << "token file " << path_ << " is truncated: the header declares " << header_.n_documents
                        << " documents, more than its " << file_bytes << " bytes can index";
      const MaskedLayout l = masked_layout(header_.n_tokens, header_.token_bytes, header_.n_documents);
      if (file_bytes < l.file_bytes)
        FT_USER_ERROR() << "token file " << path_ << " is truncated: " << file_bytes << " bytes, but "
                        << header_.n_tokens << " tokens with their loss mask and an index of " << header_.n_documents
                        << " documents need " << l.file_bytes << " (format version 2)";
      if (file_bytes > l.file_bytes)
        FT_USER_ERROR() << "token file " << path_ << " has " << file_bytes - l.file_bytes
                        << " bytes of trailing data after its document index";
      mask_ = map_ + l.mask_offset;
      index_ = map_ + l.index_offset;
    } else if (payload != header_.n_tokens * header_.token_bytes) {
      FT_USER_ERROR() << "token file " << path_ << " has " << payload - header_.n_tokens * header_.token_bytes
                      << " bytes of trailing data after its " << header_.n_tokens << " tokens";
    }
    for (std::size_t i = 48; i < kTokenFileHeaderBytes; ++i)
      if (map_[i] != 0)
        FT_USER_ERROR() << "token file " << path_ << " has non-zero reserved header bytes (offset " << i
                        << "): written by a newer or different tool";
    // The index is read by every packing-off window and costs 8 bytes per
    // document: it is checked at open whatever the file's size.
    if (header_.has_loss_mask()) validate_document_index();
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

bool TokenFile::trained(std::int64_t i) const {
  if (mask_ == nullptr) return true;
  return ((mask_[static_cast<std::size_t>(i) / 8] >> (i % 8)) & 1u) != 0;
}

std::int64_t TokenFile::document_begin(std::int64_t d) const {
  FT_CHECK(index_ != nullptr) << "token file " << path_ << " (version " << header_.version
                              << ") has no document index";
  FT_CHECK(d >= 0 && static_cast<std::uint64_t>(d) <= header_.n_documents)
      << "document " << d << " of " << header_.n_documents << " in " << path_;
  return static_cast<std::int64_t>(get_u64(index_ + static_cast<std::size_t>(d) * 8));
}

void TokenFile::validate_document_index() const {
  const std::uint64_t n = header_.n_tokens;
  if (n % 8 != 0 && (mask_[n / 8] >> (n % 8)) != 0)
    FT_USER_ERROR() << "token file " << path_ << " has non-zero padding bits after its loss mask (corrupt file?)";
  std::int64_t previous = document_begin(0);
  if (previous != 0)
    FT_USER_ERROR() << "token file " << path_ << ": its document index starts at " << previous << ", not 0";
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(header_.n_documents); ++d) {
    const std::int64_t end = document_begin(d + 1);
    if (end <= previous || end > n_tokens())
      FT_USER_ERROR() << "token file " << path_ << ": document " << d << " ends at token " << end
                      << ", not after its start " << previous << " and within the " << n_tokens() << " tokens";
    if (header_.has_eos() && raw_token(end - 1) != header_.eos_id)
      FT_USER_ERROR() << "token file " << path_ << ": document " << d << " (tokens [" << previous << ", " << end
                      << ")) does not end with the eos id " << header_.eos_id;
    previous = end;
  }
  if (previous != n_tokens())
    FT_USER_ERROR() << "token file " << path_ << ": its document index ends at token " << previous << " of "
                    << n_tokens();
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
  if (header_.has_loss_mask()) {
    validate_document_index();
    return;
  }
  if (header_.has_eos() && eos_count != header_.n_documents)
    FT_USER_ERROR() << "token file " << path_ << " declares " << header_.n_documents << " documents but holds "
                    << eos_count << " eos tokens (id " << header_.eos_id << "); each document must end with one";
}

}  // namespace ftrain::data
