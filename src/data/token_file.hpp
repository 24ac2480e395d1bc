// The ftrain token file: a flat array of token ids with a fixed header.
//
// Format (all integers little-endian), version 1:
//
//   offset  size  field
//        0     8  magic        "FTRNTOK1"
//        8     4  version      u32, = 1
//       12     4  token_bytes  u32, 2 (tokens are u16) or 4 (tokens are u32)
//       16     8  n_tokens     u64
//       24     8  vocab_size   u64, every token id is < vocab_size
//       32     8  eos_id       u64, the end-of-document token, or
//                              0xFFFFFFFFFFFFFFFF (kNoEosId) if the file has none
//       40     8  n_documents  u64, how many documents the writer appended
//       48    16  reserved     zero
//       64     -  tokens       n_tokens ids of token_bytes each
//
// The file size is exactly 64 + n_tokens * token_bytes. When the file has an
// eos_id, every document ends with one eos token (the writer appends it), so
// documents are the runs of tokens up to and including each eos; n_documents
// then equals the number of eos tokens.
//
// Validation (TokenFile): magic, version, token_bytes, vocab_size (non-zero,
// representable in token_bytes), eos_id (< vocab_size) and the file size are
// checked at open. Token ids are checked against vocab_size
//  * at open, for files of at most kEagerValidationTokens tokens (together
//    with n_documents == number of eos tokens), so small data sets fail
//    before training starts;
//  * always, for every token read() copies out, so a corrupt id in a large
//    file is reported when first used and never reaches an embedding lookup.
// validate_all() runs the full open-time scan on demand for any size.
//
// Writing (TokenFileWriter) streams documents to "<path>.tmp" and, on
// close(), fills in the header and renames the file onto <path>: a reader
// never sees a half-written token file under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace ftrain::data {

inline constexpr char kTokenFileMagic[8] = {'F', 'T', 'R', 'N', 'T', 'O', 'K', '1'};
inline constexpr std::uint32_t kTokenFileVersion = 1;
inline constexpr std::size_t kTokenFileHeaderBytes = 64;
inline constexpr std::uint64_t kNoEosId = ~std::uint64_t{0};
// Files up to this many tokens have every token id checked at open.
inline constexpr std::uint64_t kEagerValidationTokens = std::uint64_t{1} << 24;

struct TokenFileHeader {
  std::uint32_t version = kTokenFileVersion;
  std::uint32_t token_bytes = 2;
  std::uint64_t n_tokens = 0;
  std::uint64_t vocab_size = 0;
  std::uint64_t eos_id = kNoEosId;
  std::uint64_t n_documents = 0;

  bool has_eos() const { return eos_id != kNoEosId; }
};

// The smallest token width (2 or 4 bytes) that holds ids below vocab_size.
std::uint32_t token_bytes_for_vocab(std::uint64_t vocab_size);

// Streams documents into a new token file. Not copyable; if it is destroyed
// without close() (an exception while writing), the temporary file is
// removed and <path> is left as it was.
class TokenFileWriter {
 public:
  // token_bytes 0 picks token_bytes_for_vocab(vocab_size).
  TokenFileWriter(std::string path, std::uint64_t vocab_size, std::uint64_t eos_id = kNoEosId,
                  std::uint32_t token_bytes = 0);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Appends the document's tokens followed by eos_id (when the file has
  // one). The tokens themselves must not contain eos_id: it would split the
  // document in two for every reader.
  void append_document(std::span<const std::uint32_t> tokens);
  // Writes the header and renames the temporary file onto the final path.
  void close();

  const TokenFileHeader& header() const { return header_; }
  const std::string& path() const { return path_; }

 private:
  void put(std::uint32_t token);
  void flush_buffer();

  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  TokenFileHeader header_;
  std::vector<unsigned char> buffer_;
};

// A read-only, memory-mapped token file, validated at open (see above).
class TokenFile {
 public:
  explicit TokenFile(std::string path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  const TokenFileHeader& header() const { return header_; }
  std::int64_t n_tokens() const { return static_cast<std::int64_t>(header_.n_tokens); }

  // Token id at index i, unchecked against vocab_size (internal use, scans).
  std::uint32_t raw_token(std::int64_t i) const;
  // Copies tokens [first, first + count) into dst, checking each id against
  // vocab_size (UserError naming the file and index otherwise).
  void read(std::int64_t first, std::int64_t count, std::int32_t* dst) const;
  // Checks every token id and, with an eos_id, n_documents.
  void validate_all() const;

 private:
  std::string path_;
  TokenFileHeader header_;
  const unsigned char* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
};

}  // namespace ftrain::data
