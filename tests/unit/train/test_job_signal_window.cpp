// The stop window `ftrain --check` compares a step plus a save with
// (train/job_signal_window.hpp): sbatch's --signal forms, the job templates
// in jobs/, the environment, and a script that names none.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "base/error.hpp"
#include "train/job_signal_window.hpp"

using namespace ftrain;

namespace {
std::map<std::string, std::string> g_env;
const char* fake_env(const char* name) {
  const auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
std::string script(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST(JobSignalWindow, SbatchSignalForms) {
  EXPECT_EQ(sbatch_signal_seconds("B:USR1@120"), 120.0);
  EXPECT_EQ(sbatch_signal_seconds("USR1@300"), 300.0);
  EXPECT_EQ(sbatch_signal_seconds("R:10@30"), 30.0);
  EXPECT_EQ(sbatch_signal_seconds("SIGUSR1"), 60.0) << "sbatch's default lead time";
  EXPECT_FALSE(sbatch_signal_seconds("B:USR1@two").has_value());
  EXPECT_FALSE(sbatch_signal_seconds("").has_value());
}

TEST(JobSignalWindow, TheTemplatesGiveTenMinutes) {
  g_env.clear();
  const auto slurm = find_signal_window(FTRAIN_SOURCE_DIR "/jobs/slurm/llama70b.sbatch", fake_env);
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->seconds, 600.0);
  EXPECT_NE(slurm->source.find("#SBATCH --signal=B:USR1@600"), std::string::npos) << slurm->source;
  const auto pbs = find_signal_window(FTRAIN_SOURCE_DIR "/jobs/pbs/llama70b.pbs", fake_env);
  ASSERT_TRUE(pbs.has_value());
  EXPECT_EQ(pbs->seconds, 600.0);
  EXPECT_NE(pbs->source.find("FTRAIN_WARNING_S"), std::string::npos) << pbs->source;
}

TEST(JobSignalWindow, ScriptThenEnvironment) {
  g_env = {{"SBATCH_SIGNAL", "B:USR1@600"}};
  EXPECT_EQ(find_signal_window("", fake_env)->seconds, 600.0);
  EXPECT_EQ(find_signal_window(script("w.sbatch", "#!/bin/bash\n#SBATCH --signal=B:USR1@240\n"), fake_env)->seconds,
            240.0)
      << "the script given wins over the environment";
  g_env = {{"FTRAIN_WARNING_S", "90"}};
  EXPECT_EQ(find_signal_window("", fake_env)->seconds, 90.0);
  g_env.clear();
  EXPECT_FALSE(find_signal_window("", fake_env).has_value());
  EXPECT_EQ(find_signal_window(script("p.pbs", "#PBS -l walltime=1:00:00\nbash jobs/pbs/launch.sh x.in\n"), fake_env)
                ->seconds,
            120.0)
      << "launch.sh's default";
}

TEST(JobSignalWindow, AScriptWithoutASignalOrUnreadableIsAnError) {
  g_env.clear();
  EXPECT_THROW(find_signal_window(script("none.sbatch", "#!/bin/bash\n#SBATCH --nodes=2\nsrun x\n"), fake_env), UserError);
  EXPECT_THROW(find_signal_window("/nonexistent/job.sbatch", fake_env), UserError);
  EXPECT_THROW(find_signal_window(script("bad.sbatch", "#SBATCH --signal=B:USR1@soon\n"), fake_env), UserError);
  EXPECT_THROW(find_signal_window(script("late.sbatch", "#!/bin/bash\ncd x\n#SBATCH --signal=B:USR1@300\n"), fake_env),
               UserError)
      << "sbatch ignores #SBATCH lines after the first command";
}
