// Compiled by g++ running under LD_PRELOAD=libxalloc.so in the e2e test:
// templates, the standard library and regex give the compiler real work.
#include <algorithm>
#include <iostream>
#include <map>
#include <numeric>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

template <typename T, int N>
struct Fib {
  static constexpr T value = Fib<T, N - 1>::value + Fib<T, N - 2>::value;
};
template <typename T>
struct Fib<T, 1> {
  static constexpr T value = 1;
};
template <typename T>
struct Fib<T, 0> {
  static constexpr T value = 0;
};

int main() {
  std::map<std::string, std::vector<int>> groups;
  for (int i = 0; i < 1000; ++i) groups["g" + std::to_string(i % 7)].push_back(i);
  long total = 0;
  for (const auto& [name, values] : groups) total += std::accumulate(values.begin(), values.end(), 0L);
  std::ostringstream text;
  for (int i = 0; i < 100; ++i) text << "item-" << i << " ";
  std::regex re("item-(\\d+)7 ");
  std::string s = text.str();
  long matches = std::distance(std::sregex_iterator(s.begin(), s.end(), re), std::sregex_iterator());
  std::cout << "compiled program: total=" << total << " fib=" << Fib<long, 50>::value << " matches=" << matches
            << std::endl;
  return 0;
}
