// The ftrain token file: a flat array of token ids with a fixed header.
//
// Format (all integers little-endian). Version 1 (plain token streams, what
// `ftrain-prep synthetic` and `text` write):
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
// Version 2 (instruction data, `ftrain-prep instruct`): the same 64-byte
// header with version = 2, then three sections, each starting at a multiple
// of 8 bytes from the start of the file (zero padding between them):
//
//   tokens          n_tokens ids of token_bytes each, as in version 1
//   loss mask       ceil(n_tokens / 8) bytes; bit (i mod 8) of byte i / 8 is 1
//                   when token i is trained as a prediction target (response
//                   and eos tokens) and 0 when it is not (prompt tokens).
//                   Padding bits are zero.
//   document index  n_documents + 1 u64 offsets: document d is tokens
//                   [index[d], index[d+1]); index[0] = 0, strictly increasing,
//                   index[n_documents] = n_tokens.
//
// The document index, not the eos count, gives the boundaries: a multi-turn
// chat ends every turn with eos, so eos may occur inside a document. With an
// eos_id every document still ends with one. Version 1 files still load; they
// have no mask (every token is trained) and their documents are eos runs.
// The training side turns an untrained target into the ignore index -100
// (data/token_dataset.hpp).
//
// Validation (TokenFile): magic, version, token_bytes, vocab_size (non-zero,
// representable in token_bytes), eos_id (< vocab_size) and the file size are
// checked at open. Token ids are checked against vocab_size
//  * at open, for files of at most kEagerValidationTokens tokens (together
//    with n_documents == number of eos tokens for version 1), so small data
//    sets fail before training starts;
//  * always, for every token read() copies out, so a corrupt id in a large
//    file is reported when first used and never reaches an embedding lookup.
// validate_all() runs the full open-time scan on demand for any size. A
// version 2 file's document index (increasing, ending at n_tokens, each
// document ending with eos) and mask padding are checked at open whatever
// its size.
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
// The newest version this ftrain reads and writes; version 1 still loads.
inline constexpr std::uint32_t kTokenFileVersion = 2;
inline constexpr std::uint32_t kPlainTokenFileVersion = 1;
inline constexpr std::uint32_t kMaskedTokenFileVersion = 2;
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
  // Version 2: a loss mask and a document index follow the tokens.
  bool has_loss_mask() const { return version >= kMaskedTokenFileVersion; }
};

// What a writer produces: plain (version 1) or with a loss mask and a
// document index (version 2).
enum class TokenFileLayout { plain, masked };

// The smallest token width (2 or 4 bytes) that holds ids below vocab_size.
std::uint32_t token_bytes_for_vocab(std::uint64_t vocab_size);

// Streams documents into a new token file. Not copyable; if it is destroyed
// without close() (an exception while writing), the temporary file is
// removed and <path> is left as it was.
class TokenFileWriter {
 public:
  // token_bytes 0 picks token_bytes_for_vocab(vocab_size). A masked writer
  // keeps the mask (n_tokens / 8 bytes) and the document index (8 bytes per
  // document) in memory until close().
  TokenFileWriter(std::string path, std::uint64_t vocab_size, std::uint64_t eos_id = kNoEosId,
                  std::uint32_t token_bytes = 0, TokenFileLayout layout = TokenFileLayout::plain);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Appends the document's tokens followed by eos_id (when the file has
  // one). The tokens themselves must not contain eos_id: it would split the
  // document in two for every reader.
  // In a masked file every token of such a document is trained.
  void append_document(std::span<const std::uint32_t> tokens);
  // Masked files only: trained[i] != 0 marks tokens[i] as a prediction
  // target; the appended eos is always trained (the model learns to stop).
  // Here tokens may contain eos_id (chat turns end with it): the document
  // index, not eos, delimits documents in version 2.
  void append_document(std::span<const std::uint32_t> tokens, std::span<const std::uint8_t> trained);
  // Writes the header and renames the temporary file onto the final path.
  void close();

  const TokenFileHeader& header() const { return header_; }
  const std::string& path() const { return path_; }

 private:
  void put(std::uint32_t token, bool trained);
  void flush_buffer();
  void write_zeros(std::size_t n);
  void check_token(std::size_t i, std::uint32_t t, bool eos_allowed) const;

  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  TokenFileHeader header_;
  std::vector<unsigned char> buffer_;
  TokenFileLayout layout_ = TokenFileLayout::plain;
  std::vector<std::uint8_t> mask_bits_;          // masked: the loss mask section
  std::vector<std::uint64_t> document_offsets_;  // masked: the document index
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
  // Whether token i is trained as a target: the loss mask bit in version 2,
  // always true in version 1 (which has no mask).
  bool trained(std::int64_t i) const;
  // Version 2: document d (0 <= d < n_documents) is tokens
  // [document_begin(d), document_begin(d + 1)).
  bool has_document_index() const { return header_.has_loss_mask(); }
  std::int64_t document_begin(std::int64_t d) const;
  // Checks every token id and the document structure (n_documents against the
  // eos count in version 1; the index and mask padding in version 2).
  void validate_all() const;

 private:
  std::string path_;
  TokenFileHeader header_;
  const unsigned char* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  // Version 2: the document index (and the mask's padding bits).
  void validate_document_index() const;

  const unsigned char* mask_ = nullptr;   // version 2
  const unsigned char* index_ = nullptr;  // version 2
};

}  // namespace ftrain::data
