#include "train/job_signal_window.hpp"

#include <cctype>
#include <fstream>
#include <regex>

#include "base/error.hpp"

namespace ftrain {

namespace {

std::optional<double> whole_seconds(const std::string& text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  for (const char ch : text)
    if (!std::isdigit(static_cast<unsigned char>(ch))) return std::nullopt;
  return std::stod(text);
}

}  // namespace

std::optional<double> sbatch_signal_seconds(const std::string& value) {
  // [{R|B}:]<sig_num>[@sig_time], e.g. B:USR1@120; sig_time defaults to 60.
  static const std::regex form(R"(^(?:[RB]{1,2}:)?(?:SIG)?[A-Z0-9]+(?:@([0-9]+))?$)");
  std::smatch m;
  if (!std::regex_match(value, m, form)) return std::nullopt;
  return m[1].matched ? whole_seconds(m[1].str()) : std::optional<double>(60.0);
}

std::optional<SignalWindow> find_signal_window(const std::string& job_script, const EnvironmentLookup& env) {
  if (!job_script.empty()) {
    std::ifstream in(job_script);
    if (!in) FT_USER_ERROR() << "command line: --job-script " << job_script << ": cannot be read";
    static const std::regex sbatch(R"(^#SBATCH\s+--signal[=\s]\s*(\S+))");
    static const std::regex pbs_warning(R"(^\s*(?:export\s+)?FTRAIN_WARNING_S=\$?\{?(?:FTRAIN_WARNING_S:-)?([0-9]+))");
    std::optional<SignalWindow> pbs;
    bool runs_pbs_launcher = false;
    std::string line;
    bool directives = true;  // sbatch reads #SBATCH lines up to the first command only
    for (int number = 1; std::getline(in, line); ++number) {
      const std::string where = job_script + ":" + std::to_string(number) + ": ";
      const auto first = line.find_first_not_of(" \t");
      if (first != std::string::npos && line[first] != '#') directives = false;
      std::smatch m;
      if (directives && std::regex_search(line, m, sbatch)) {
        const std::optional<double> seconds = sbatch_signal_seconds(m[1].str());
        if (!seconds) FT_USER_ERROR() << where << "'" << line << "': not an sbatch --signal=[B:]SIG[@SECONDS]";
        return SignalWindow{*seconds, where + line};
      }
      if (std::regex_search(line, m, pbs_warning)) pbs = SignalWindow{std::stod(m[1].str()), where + line};
      if (line.find("jobs/pbs/launch.sh") != std::string::npos && line.find('#') != 0) runs_pbs_launcher = true;
    }
    if (pbs) return pbs;
    if (runs_pbs_launcher)
      return SignalWindow{120, job_script + ": runs jobs/pbs/launch.sh, which signals 120 s before the walltime "
                                            "(FTRAIN_WARNING_S unset)"};
    FT_USER_ERROR() << "command line: --job-script " << job_script
                    << ": no `#SBATCH --signal=...` line and no jobs/pbs/launch.sh: the job gets no warning signal "
                       "before its time limit (add `#SBATCH --signal=B:USR1@300`)";
  }
  if (const char* v = env("SBATCH_SIGNAL"); v != nullptr && *v != '\0') {
    if (const std::optional<double> seconds = sbatch_signal_seconds(v))
      return SignalWindow{*seconds, std::string("SBATCH_SIGNAL=") + v};
  }
  if (const char* v = env("FTRAIN_WARNING_S"); v != nullptr && *v != '\0') {
    if (const std::optional<double> seconds = whole_seconds(v))
      return SignalWindow{*seconds, std::string("FTRAIN_WARNING_S=") + v};
  }
  return std::nullopt;
}

}  // namespace ftrain
