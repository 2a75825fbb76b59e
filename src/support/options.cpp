#include "support/options.h"

#include <cstring>

#include "platform/os.h"
#include "support/report.h"

extern char** environ;

namespace xalloc {

Options g_options;

namespace {

enum class OptionType { kBool, kSwitch, kSize, kMillis, kCount, kString };

struct OptionSpec {
  const char* name;  // without the XALLOC_ prefix
  OptionType type;
  void* target;
  const char* help;
  // Numbers above it are bad values: larger ones would overflow where they
  // are used (a delay added to a clock, a percentage multiplied by bytes).
  uint64_t max = 0;
};

const OptionSpec kSpecs[] = {
    {"PURGE_DELAY_MS", OptionType::kMillis, &g_options.purge_delay_ms,
     "ms free memory stays resident before it is returned to the OS", uint64_t{1} << 40},
    {"DIRTY_PERCENT", OptionType::kCount, &g_options.dirty_percent,
     "free memory kept resident for reuse, in percent of the memory in use", 1000000},
    {"BACKGROUND_PURGE", OptionType::kSwitch, &g_options.background_purge,
     "a thread returns free memory to the OS on its own clock (auto: once 64 MiB are in use)"},
    {"BORROW", OptionType::kBool, &g_options.borrow,
     "reuse blocks freed for threads that are not running before taking new memory"},
    {"RETAIN_SEGMENTS", OptionType::kCount, &g_options.retain_segments, "empty 32 MiB segments kept for reuse",
     uint64_t{1} << 20},
    {"COMMIT_ON_DEMAND", OptionType::kBool, &g_options.commit_on_demand,
     "reserve memory inaccessible and commit it as it is used (default: 1 under ulimit -d or vm.overcommit_memory=2)"},
    {"HUGE_PAGES", OptionType::kSwitch, &g_options.huge_pages,
     "transparent huge pages for segments: 0 never (even where the kernel would by default), 1 always, "
     "auto for the densely used 2 MiB ranges of heaps over 64 MiB"},
    {"HUGE_CACHE", OptionType::kSize, &g_options.huge_cache_bytes, "bytes of freed huge blocks kept for reuse",
     uint64_t{1} << 47},
    {"REMOTE_BATCH", OptionType::kSize, &g_options.remote_batch_bytes,
     "bytes of cross-thread frees buffered before they are sent", uint64_t{1} << 40},
    {"VERBOSE", OptionType::kBool, &g_options.verbose, "print the effective configuration at start-up"},
    {"STATS", OptionType::kBool, &g_options.stats, "print statistics at exit"},
    {"STATS_FILE", OptionType::kString, &g_options.stats_file,
     "write the statistics and leak report at exit to this file (%p: the pid) instead of stderr"},
    {"ABORT_ON_INVALID_FREE", OptionType::kBool, &g_options.abort_on_invalid_free,
     "abort on free() of a pointer xalloc never handed out (0: ignore it)"},
    {"PROF", OptionType::kBool, &g_options.prof, "sample allocations and write a heap profile at exit"},
    {"PROF_RATE", OptionType::kSize, &g_options.prof_rate, "mean bytes allocated between two samples",
     uint64_t{1} << 40},
    {"PROF_PREFIX", OptionType::kString, &g_options.prof_prefix,
     "heap profiles are written to <prefix>.<pid>.<seq>.heap and .collapsed"},
    {"PROF_SIGNAL", OptionType::kCount, &g_options.prof_signal, "signal number that writes a heap profile", 64},
    {"PROF_PEAK", OptionType::kSize, &g_options.prof_peak,
     "write a heap profile when sampled live memory peaks this many bytes above the last one written (0: never)",
     uint64_t{1} << 50},
    {"PROF_INTERVAL", OptionType::kSize, &g_options.prof_interval,
     "write a heap profile every this many bytes allocated (0: never)", uint64_t{1} << 50},
    {"PROF_EXIT", OptionType::kCount, &g_options.prof_exit,
     "heap profile at exit: 0 none, 1 when sampled memory is live, 2 always", 2},
    {"LEAKS", OptionType::kBool, &g_options.leaks, "print the top allocation sites of memory live at exit"},
    {"QUARANTINE", OptionType::kCount, &g_options.quarantine,
     "secure build: later frees a freed block waits for before it can be reused (at most 256)", 256},
#if defined(XALLOC_COUNT_SHARED)
    {"COUNT_SHARED_AFTER_MS", OptionType::kMillis, &g_options.count_shared_after_ms,
     "counting build: count shared writes from this many ms after start-up", uint64_t{1} << 40},
#endif
};

bool parse_unsigned(const char* text, uint64_t* out, bool allow_suffix) {
  if (*text == '\0') return false;
  uint64_t value = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; ++p) {
    uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (value > (~uint64_t{0} - digit) / 10) return false;
    value = value * 10 + digit;
  }
  if (p == text) return false;
  if (allow_suffix && *p != '\0') {
    unsigned shift = 0;
    switch (*p | 0x20) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      default: return false;
    }
    ++p;
    if ((*p | 0x20) == 'i') ++p;
    if ((*p | 0x20) == 'b') ++p;
    if (value > (~uint64_t{0} >> shift)) return false;
    value <<= shift;
  }
  if (*p != '\0') return false;
  *out = value;
  return true;
}

bool parse_bool(const char* text, bool* out) {
  if (strcmp(text, "1") == 0 || strcmp(text, "true") == 0 || strcmp(text, "yes") == 0 || strcmp(text, "on") == 0) {
    *out = true;
    return true;
  }
  if (strcmp(text, "0") == 0 || strcmp(text, "false") == 0 || strcmp(text, "no") == 0 || strcmp(text, "off") == 0) {
    *out = false;
    return true;
  }
  return false;
}

bool parse_switch(const char* text, Switch* out) {
  bool on = false;
  if (strcmp(text, "auto") == 0) {
    *out = Switch::kAuto;
  } else if (parse_bool(text, &on)) {
    *out = on ? Switch::kOn : Switch::kOff;
  } else {
    return false;
  }
  return true;
}

bool apply(const OptionSpec& spec, const char* value) {
  switch (spec.type) {
    case OptionType::kBool:
      return parse_bool(value, static_cast<bool*>(spec.target));
    case OptionType::kSwitch:
      return parse_switch(value, static_cast<Switch*>(spec.target));
    case OptionType::kSize:
    case OptionType::kMillis:
    case OptionType::kCount: {
      uint64_t number = 0;
      if (!parse_unsigned(value, &number, spec.type == OptionType::kSize)) return false;
      if (spec.max != 0 && number > spec.max) return false;
      *static_cast<uint64_t*>(spec.target) = number;
      return true;
    }
    case OptionType::kString:
      if (*value == '\0') return false;
      *static_cast<const char**>(spec.target) = value;  // environ outlives the program
      return true;
  }
  return false;
}

}  // namespace

namespace {

// Applies the XALLOC_* variables of the environment; true if one of them
// set XALLOC_COMMIT_ON_DEMAND.
bool read_environment() {
  bool commit_given = false;
  constexpr char kPrefix[] = "XALLOC_";
  constexpr size_t kPrefixLen = sizeof(kPrefix) - 1;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* entry = *e;
    if (strncmp(entry, kPrefix, kPrefixLen) != 0) continue;
    const char* name = entry + kPrefixLen;
    const char* eq = strchr(name, '=');
    if (eq == nullptr) continue;
    size_t name_len = static_cast<size_t>(eq - name);
    const OptionSpec* match = nullptr;
    for (const OptionSpec& spec : kSpecs) {
      if (strlen(spec.name) == name_len && strncmp(spec.name, name, name_len) == 0) match = &spec;
    }
    if (match == nullptr) {
      report::warning("unknown option %s ignored", entry);
    } else if (!apply(*match, eq + 1) || (match->target == &g_options.prof_rate && g_options.prof_rate == 0)) {
      if (match->target == &g_options.prof_rate) g_options.prof_rate = 512 << 10;
      report::warning("bad value in %s ignored", entry);
    } else if (match->target == &g_options.commit_on_demand) {
      commit_given = true;
    }
  }
  return commit_given;
}

}  // namespace

void options_init() {
  // Unless the environment says, the system decides (a few system calls,
  // made once).
  if (!read_environment()) g_options.commit_on_demand = os::writable_mappings_are_limited();
  if (g_options.verbose) options_print();
}

const char* switch_name(Switch value) {
  static constexpr const char* kWords[] = {"0", "1", "auto"};
  return kWords[static_cast<unsigned>(value)];
}

void options_print() {
  for (const OptionSpec& spec : kSpecs) {
    if (spec.type == OptionType::kString) {
      report::message("option XALLOC_%s=%s  (%s)", spec.name, *static_cast<const char**>(spec.target), spec.help);
      continue;
    }
    if (spec.type == OptionType::kSwitch) {
      report::message("option XALLOC_%s=%s  (%s)", spec.name, switch_name(*static_cast<Switch*>(spec.target)), spec.help);
      continue;
    }
    uint64_t value = spec.type == OptionType::kBool ? (*static_cast<bool*>(spec.target) ? 1 : 0)
                                                    : *static_cast<uint64_t*>(spec.target);
    report::message("option XALLOC_%s=%u  (%s)", spec.name, value, spec.help);
  }
}

}  // namespace xalloc
