/*
 * realworld: a service-like load - worker threads deserialize, transform
 * and drop many records of mixed sizes.
 *
 * Models seed 000 (alloc-perf-test, "an allocator performance test using a
 * real-world load": a trimmed async Rust service; generated data is
 * deserialized and transformed by many tasks on an executor; -n sets the
 * number of parallel "subs" and the data grows with it; published: time of
 * -n 4 and -n 8, and the degradation figure
 * time(n8) / time(n4) / (size(n8) / size(n4))).
 *
 * Here: `workers` subs each generate `records` JSON-like text records
 * (ids, a user name, 0-8 tags, 0-12 string attributes, 0-48 numbers, and a
 * body that is short for most records, up to 4 KiB for 9% and up to 64 KiB
 * for 1%). Then a pool of `workers` threads runs tasks from one queue, like
 * an async executor: a parse task turns 256 lines into a generic document
 * tree (std::map objects, std::vector arrays, std::string strings) and
 * hands a transform task to the next worker, which serves such hand-offs
 * before taking new parse tasks (so few batches are in flight): it converts
 * each tree into a typed record, derives a normalised key, sorted tags,
 * re-keyed attributes and statistics, serialises a summary, updates a
 * shared tag index, and drops everything - so the parsed objects are freed
 * by a thread other than the one that allocated them.
 *
 * usage: realworld [workers=8] [records_per_worker=20000] [seed=1]
 * prints: workers, records, bytes (input size), gen_s (data generation),
 *         process_s (the task phase: what the degradation figure uses),
 *         records_per_s, checksum (identical under every allocator).
 */
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "xbench.h"

namespace {

constexpr size_t kLinesPerTask = 256;
constexpr size_t kInboxLimit = 2;  // parsed batches waiting per worker

// ---------------------------------------------------------------- data --

std::string make_word(xb_rng &rng, size_t min_len, size_t max_len) {
  static const char *const kSyllables[] = {"ka", "lo", "mi", "ne", "ru", "ta", "shi", "vo",
                                           "den", "pax", "qui", "zor", "el", "an", "ix", "um"};
  std::string w;
  size_t len = xb_range(&rng, min_len, max_len);
  while (w.size() < len) w += kSyllables[xb_below(&rng, 16)];
  w.resize(len);
  return w;
}

void append_number(std::string &out, double v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, "%.3f", v);
  out.append(buf, static_cast<size_t>(n));
}

// One sub's input: newline-separated records and where each task's lines start.
struct SubData {
  std::string text;
  std::vector<size_t> task_offsets;  // begin of every task; text.size() at the end
};

void generate(SubData &sub, uint64_t records, uint64_t seed) {
  xb_rng rng = xb_rng_make(seed);
  std::vector<std::string> vocabulary;
  for (int i = 0; i < 4000; i++) vocabulary.push_back(make_word(rng, 3, 12));
  for (uint64_t r = 0; r < records; r++) {
    if (r % kLinesPerTask == 0) sub.task_offsets.push_back(sub.text.size());
    std::string &t = sub.text;
    t += "{\"id\":";
    t += std::to_string(seed * 100000000ull + r);
    t += ",\"user\":\"";
    t += make_word(rng, 4, 24);
    t += "\",\"tags\":[";
    for (uint64_t i = 0, n = xb_below(&rng, 9); i < n; i++) {
      if (i) t += ',';
      t += '"';
      t += vocabulary[xb_below(&rng, vocabulary.size())];
      t += '"';
    }
    t += "],\"attrs\":{";
    for (uint64_t i = 0, n = xb_below(&rng, 13); i < n; i++) {
      if (i) t += ',';
      t += '"';
      t += make_word(rng, 3, 16);
      t += "\":\"";
      t += make_word(rng, 1, 40);
      t += '"';
    }
    t += "},\"values\":[";
    for (uint64_t i = 0, n = xb_below(&rng, 49); i < n; i++) {
      if (i) t += ',';
      append_number(t, xb_unit(&rng) * 1000.0 - 500.0);
    }
    t += "],\"body\":\"";
    uint64_t kind = xb_below(&rng, 100);
    size_t body = kind < 90 ? xb_below(&rng, 201) : kind < 99 ? xb_range(&rng, 200, 4096) : xb_range(&rng, 4096, 65536);
    while (body > 0) {
      const std::string &w = vocabulary[xb_below(&rng, vocabulary.size())];
      size_t n = std::min(body, w.size() + 1);
      t.append(w, 0, n - 1);
      t += ' ';
      body -= n;
    }
    t += "\"}\n";
  }
  sub.task_offsets.push_back(sub.text.size());
}

// ------------------------------------------------------- generic tree --

struct Value {
  enum Kind : uint8_t { kNull, kNumber, kString, kArray, kObject };
  Kind kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Value> items;                              // kArray
  std::unique_ptr<std::map<std::string, Value>> fields;  // kObject
};

class Parser {
 public:
  explicit Parser(std::string_view in) : in_(in) {}

  Value parse_value() {
    Value v;
    skip_space();
    if (pos_ >= in_.size()) xb_fail("realworld: unexpected end of input");
    char c = in_[pos_];
    if (c == '{') {
      v.kind = Value::kObject;
      v.fields = std::make_unique<std::map<std::string, Value>>();
      pos_++;
      skip_space();
      if (peek() == '}') { pos_++; return v; }
      for (;;) {
        skip_space();
        std::string key = parse_string();
        skip_space();
        expect(':');
        v.fields->emplace(std::move(key), parse_value());
        skip_space();
        if (peek() == ',') { pos_++; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::kArray;
      pos_++;
      skip_space();
      if (peek() == ']') { pos_++; return v; }
      for (;;) {
        v.items.push_back(parse_value());
        skip_space();
        if (peek() == ',') { pos_++; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::kString;
      v.text = parse_string();
      return v;
    }
    v.kind = Value::kNumber;
    const char *start = in_.data() + pos_;
    char *end = nullptr;
    v.number = std::strtod(start, &end);
    if (end == start) xb_fail("realworld: bad number");
    pos_ += static_cast<size_t>(end - start);
    return v;
  }

  bool at_end() {
    skip_space();
    return pos_ >= in_.size();
  }

 private:
  char peek() const { return pos_ < in_.size() ? in_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < in_.size() && (in_[pos_] == ' ' || in_[pos_] == '\n')) pos_++;
  }
  void expect(char c) {
    if (peek() != c) xb_fail("realworld: expected '%c' at %zu", c, pos_);
    pos_++;
  }
  std::string parse_string() {
    expect('"');
    size_t end = in_.find('"', pos_);
    if (end == std::string_view::npos) xb_fail("realworld: unterminated string");
    std::string s(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  std::string_view in_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------- transform --

struct Record {
  uint64_t id = 0;
  std::string user;
  std::vector<std::string> tags;
  std::map<std::string, std::string> attrs;
  std::vector<double> values;
  std::string body;
};

const Value &field(const Value &obj, const char *name) {
  auto it = obj.fields->find(name);
  if (it == obj.fields->end()) xb_fail("realworld: record without \"%s\"", name);
  return it->second;
}

Record to_record(const Value &v) {
  Record r;
  r.id = static_cast<uint64_t>(field(v, "id").number);
  r.user = field(v, "user").text;
  for (const Value &t : field(v, "tags").items) r.tags.push_back(t.text);
  for (const auto &[k, a] : *field(v, "attrs").fields) r.attrs.emplace(k, a.text);
  for (const Value &n : field(v, "values").items) r.values.push_back(n.number);
  r.body = field(v, "body").text;
  return r;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Derives a summary of one record; returns its hash.
uint64_t transform(const Record &r, std::unordered_map<std::string, uint32_t> &tag_counts) {
  std::string key = r.user;
  std::transform(key.begin(), key.end(), key.begin(), [](char c) { return static_cast<char>(c ^ 0x20); });
  key += '#';
  key += std::to_string(r.id);

  std::vector<std::string> tags = r.tags;
  std::sort(tags.begin(), tags.end());
  tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  for (const std::string &t : tags) tag_counts[t]++;

  std::map<std::string, std::string> attrs;
  for (const auto &[k, v] : r.attrs) attrs.emplace("attr." + k, v + "/" + key);

  std::vector<double> sorted = r.values;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double x : sorted) sum += x;

  size_t words = static_cast<size_t>(std::count(r.body.begin(), r.body.end(), ' '));
  std::string summary = "{\"key\":\"" + key + "\",\"tags\":[";
  for (size_t i = 0; i < tags.size(); i++) summary += (i ? ",\"" : "\"") + tags[i] + "\"";
  summary += "],\"attrs\":{";
  bool first = true;
  for (const auto &[k, v] : attrs) {
    summary += (first ? "\"" : ",\"") + k + "\":\"" + v + "\"";
    first = false;
  }
  summary += "},\"n\":" + std::to_string(sorted.size());
  if (!sorted.empty()) {
    summary += ",\"median\":";
    append_number(summary, sorted[sorted.size() / 2]);
    summary += ",\"sum\":";
    append_number(summary, sum);
  }
  summary += ",\"words\":" + std::to_string(words) + ",\"head\":\"" + r.body.substr(0, 32) + "\"}";
  return fnv1a(summary);
}

// ----------------------------------------------------------- executor --

struct Task {
  enum Kind { kParse, kTransform } kind = kParse;
  std::string_view lines;     // kParse
  std::vector<Value> parsed;  // kTransform
};

// A global queue of parse tasks plus one inbox per worker for the
// continuations. A worker serves its inbox first, so few parsed batches are
// in flight; a parse task's continuation goes to the next worker's inbox,
// so the records are dropped by a thread other than the one that built them
// (as when an async runtime resumes a task on another thread).
class Executor {
 public:
  explicit Executor(unsigned workers) : inbox_(workers) {}

  void push(Task t) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(t));
    pending_++;
  }
  void push_to(unsigned worker, Task t) {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_[worker].push_back(std::move(t));
    pending_++;
    cv_.notify_all();
  }
  // Blocks for a task for `worker`; false when every task is done. A new
  // parse task is only taken while the next worker's inbox has room, which
  // bounds the parsed batches in flight (the next worker always drains its
  // inbox first, so this cannot deadlock).
  bool pop(unsigned worker, Task &out) {
    std::unique_lock<std::mutex> lock(mu_);
    std::deque<Task> &mine = inbox_[worker];
    const std::deque<Task> &next = inbox_[(worker + 1) % inbox_.size()];
    cv_.wait(lock, [&] {
      return !mine.empty() || (!queue_.empty() && next.size() < kInboxLimit) || pending_ == 0;
    });
    if (!mine.empty()) {
      out = std::move(mine.front());
      mine.pop_front();
      cv_.notify_all();  // room in this inbox
      return true;
    }
    if (queue_.empty()) return false;
    out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  void done() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) cv_.notify_all();
  }
  unsigned workers() const { return static_cast<unsigned>(inbox_.size()); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::vector<std::deque<Task>> inbox_;
  size_t pending_ = 0;  // queued or running
};

struct Shared {
  explicit Shared(unsigned workers) : executor(workers) {}
  Executor executor;
  std::atomic<uint64_t> checksum{0};
  std::atomic<uint64_t> records{0};
  std::mutex index_mu;
  std::map<std::string, uint64_t> tag_index;
};

void worker(Shared &s, unsigned id) {
  Task task;
  while (s.executor.pop(id, task)) {
    if (task.kind == Task::kParse) {
      Task next;
      next.kind = Task::kTransform;
      Parser parser(task.lines);
      while (!parser.at_end()) next.parsed.push_back(parser.parse_value());
      s.executor.push_to((id + 1) % s.executor.workers(), std::move(next));
    } else {
      std::unordered_map<std::string, uint32_t> tag_counts;
      uint64_t sum = 0;
      for (const Value &v : task.parsed) sum += transform(to_record(v), tag_counts);
      {
        std::lock_guard<std::mutex> lock(s.index_mu);
        for (const auto &[tag, n] : tag_counts) s.tag_index[tag] += n;
      }
      s.checksum.fetch_add(sum, std::memory_order_relaxed);
      s.records.fetch_add(task.parsed.size(), std::memory_order_relaxed);
    }
    task = Task{};  // drop what the task held, on this thread
    s.executor.done();
  }
}

}  // namespace

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[workers=8] [records_per_worker=20000] [seed=1]");
  xb_init();
  unsigned workers = static_cast<unsigned>(xb_arg_u64(argc, argv, 1, 8));
  uint64_t records = xb_arg_u64(argc, argv, 2, 20000);
  uint64_t seed = xb_arg_u64(argc, argv, 3, 1);
  if (workers == 0 || records == 0) return XB_EXIT_USAGE;

  uint64_t g0 = xb_now_ns();
  std::vector<SubData> subs(workers);
  {
    std::vector<std::thread> gen;
    for (unsigned i = 0; i < workers; i++) gen.emplace_back(generate, std::ref(subs[i]), records, seed * 1000 + i);
    for (auto &t : gen) t.join();
  }
  double gen_secs = xb_seconds_since(g0);
  size_t bytes = 0;
  for (const SubData &sub : subs) bytes += sub.text.size();

  Shared shared(workers);
  for (const SubData &sub : subs)
    for (size_t i = 0; i + 1 < sub.task_offsets.size(); i++) {
      Task t;
      t.kind = Task::kParse;
      t.lines = std::string_view(sub.text).substr(sub.task_offsets[i], sub.task_offsets[i + 1] - sub.task_offsets[i]);
      shared.executor.push(std::move(t));
    }

  uint64_t p0 = xb_now_ns();
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < workers; i++) pool.emplace_back(worker, std::ref(shared), i);
  for (auto &t : pool) t.join();
  double process_secs = xb_seconds_since(p0);

  if (shared.records.load() != records * workers) xb_fail("realworld: processed %llu records, expected %llu",
                                                          static_cast<unsigned long long>(shared.records.load()),
                                                          static_cast<unsigned long long>(records * workers));
  std::printf("workers=%u\n", workers);
  std::printf("records=%llu\n", static_cast<unsigned long long>(records * workers));
  std::printf("bytes=%zu\n", bytes);
  std::printf("gen_s=%.6f\n", gen_secs);
  std::printf("process_s=%.6f\n", process_secs);
  std::printf("records_per_s=%.0f\n", static_cast<double>(records * workers) / process_secs);
  std::printf("checksum=%llu\n", static_cast<unsigned long long>(shared.checksum.load()));
  std::printf("distinct_tags=%zu\n", shared.tag_index.size());
  return 0;
}
