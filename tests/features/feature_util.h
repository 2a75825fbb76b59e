// Helpers of the feature tests (features_test.cpp, dumps_test.cpp): running
// a program in a child process with an environment of its own and
// capturing its output, temporary directories, files, tolerances, and
// google-pprof's text output. The test programs themselves run on the C
// library's malloc.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace xfeature {

struct Outcome {
  int status = -1;
  bool timed_out = false;
  pid_t pid = 0;
  std::string out, err;

  bool exited_ok() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool exited_with(int code) const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == code; }
  int signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }
  std::string describe() const {
    std::ostringstream s;
    if (timed_out) s << "timed out";
    else if (WIFEXITED(status)) s << "exited with " << WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) s << "killed by signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status)) << ")";
    s << "\n--- stdout:\n" << out.substr(0, 4000) << "\n--- stderr:\n" << err.substr(0, 4000);
    return s.str();
  }
};

// Runs argv with this process's environment, minus LD_PRELOAD and every
// XALLOC_* variable, plus `env` ("NAME=value"); captures stdout and stderr.
// Killed after timeout_s seconds.
inline Outcome run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                int timeout_s = 60) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string var = *e;
    if (var.rfind("LD_PRELOAD=", 0) == 0 || var.rfind("XALLOC_", 0) == 0) continue;
    environment.push_back(var);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> c_argv, c_env;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const std::string& e : environment) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  Outcome r;
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
    r.err = "pipe failed";
    return r;
  }
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[0]);
    close(err_pipe[1]);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    execve(c_argv[0], c_argv.data(), c_env.data());
    std::fprintf(stderr, "exec %s: %s\n", c_argv[0], std::strerror(errno));
    _exit(127);
  }
  r.pid = pid;
  close(out_pipe[1]);
  close(err_pipe[1]);
  struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (open_fds > 0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed_ms > timeout_s * 1000L) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, 100);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[65536];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

inline std::string preload(const char* library) { return std::string("LD_PRELOAD=") + library; }

// key=value lines of a probe's output.
inline std::map<std::string, double> key_values(const std::string& text) {
  std::map<std::string, double> values;
  for (const std::string& line : xtest::split_lines(text)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos || line.find(' ') < eq) continue;
    values[line.substr(0, eq)] = std::strtod(line.c_str() + eq + 1, nullptr);
  }
  return values;
}

// The first line of `text` starting with `prefix`, or "".
inline std::string line_starting(const std::string& text, const std::string& prefix) {
  for (const std::string& line : xtest::split_lines(text)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

// A temporary directory, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/xalloc-features-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    if (!path_.empty()) run_program({"/bin/rm", "-rf", path_});
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

inline ::testing::AssertionResult within(double value, double expected, double tolerance, const char* what) {
  if (std::fabs(value - expected) <= tolerance * expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << value << ", expected " << expected << " +- "
                                       << tolerance * 100 << "%";
}

inline std::string find_pprof() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin"}) {
    for (const char* name : {"google-pprof", "pprof"}) {
      std::string path = std::string(dir) + "/" + name;
      if (access(path.c_str(), X_OK) == 0) return path;
    }
  }
  return "";
}

// google-pprof --text: "Total: 146.7 MB" and "flat flat% sum% cum cum% function".
struct PprofText {
  double total_mb = -1;
  std::map<std::string, double> cum_mb;
};

inline PprofText parse_pprof(const std::string& text) {
  PprofText t;
  for (const std::string& line : xtest::split_lines(text)) {
    if (line.rfind("Total: ", 0) == 0) {
      t.total_mb = std::strtod(line.c_str() + 7, nullptr);
      continue;
    }
    std::istringstream in(line);
    double flat, cum;
    std::string flat_pct, sum_pct, cum_pct, name;
    if (in >> flat >> flat_pct >> sum_pct >> cum >> cum_pct >> name) t.cum_mb[name] = cum;
  }
  return t;
}

// The files of a process's numbered heap profile `seq`, without the
// extension: <prefix>.<pid>.<seq>.
inline std::string profile_stem(const std::string& prefix, pid_t pid, int seq) {
  return prefix + "." + std::to_string(pid) + "." + std::to_string(seq);
}

// How many numbered profiles (0, 1, ... with no gap) a process left.
inline int profile_count(const std::string& prefix, pid_t pid) {
  int n = 0;
  while (file_exists(profile_stem(prefix, pid, n) + ".heap")) ++n;
  return n;
}

}  // namespace xfeature
