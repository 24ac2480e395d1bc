#pragma once
// Who and when, as ftrain writes them into files it leaves behind (the
// run-directory lock's owner record, the recorded host peak, write probes).

#include <string>

namespace ftrain {

// This machine's host name (gethostname), "" if it has none.
std::string host_name();

// Now, UTC, ISO 8601 to the second: "2026-11-27T01:07:59Z".
std::string utc_timestamp();

}  // namespace ftrain
