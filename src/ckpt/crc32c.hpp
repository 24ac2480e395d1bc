// CRC-32C (Castagnoli), the checksum of sharded checkpoint data (format 3).
//
// Why not HDF5's Fletcher32 filter: a filter needs a chunked dataset, and the
// filter pipeline copies and checksums every 4 MiB chunk byte pair by byte
// pair; on the development VM that made a save ~3x slower in CPU than the
// plain contiguous write (share/doc/performance.md). CRC-32C runs on the
// SSE4.2 instruction where the CPU has it (several GB/s per core, far above
// any disk) and detects every burst error up to 32 bits, which Fletcher32
// does not. Other CPUs use a table (slicing by 8).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ftrain::ckpt {

// CRC-32C of `size` bytes, continuing from `crc` (0 for a fresh checksum;
// crc32c(b, crc32c(a)) == crc32c(a + b)).
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);

// Which implementation crc32c uses on this CPU ("sse4.2" or "table").
const char* crc32c_implementation();

}  // namespace ftrain::ckpt
