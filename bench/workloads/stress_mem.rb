# stress_mem.rb: Ruby string-allocation stress, run by the system's ruby.
#
# Reproduces the allocation pattern of the Ruby allocator benchmark of seed
# 003 (allocator_bench's stress_mem.rb, run with STRESS_THREADS=1 and 8):
# the threads share 12,000,000 short-lived strings, 600,000 retained strings
# and chunks of 200,000 strings (each count divided by the thread count).
# A step either appends a string of rand(100) spaces to the thread's current
# chunk (it dies when the chunk is reset) or, with equal odds while both
# remain, retains one in an array shared by all threads until exit. When a
# chunk outgrows its limit it is replaced by a chunk holding one string of
# rand(100_000) spaces. Ruby keeps strings shorter than 24 bytes inside the
# object slot, so only the longer ones (and the arrays) reach malloc; the
# garbage collector decides when they are freed.
#
# Differences from the seed: each thread draws from its own generator
# seeded with 1 + thread index (the seed shared one seeded generator and
# used the unseeded global one for retained sizes), so runs are repeatable;
# RSS is read from /proc/self/status instead of by running ps.
#
# usage: [STRESS_THREADS=N] [XBENCH_EXPECT=substring] ruby stress_mem.rb [scale=1.0]
#   scale multiplies the three counts (bench/run.py uses it for quick runs).
# prints: one line "rss_kb,duration" like the seed: resident set size at the
#   end in KiB and the seconds spent in the stress, e.g. "143520,3.216".
#   With XBENCH_EXPECT set, it first checks that the shared object defining
#   malloc contains that substring and exits with status 86 if not.
require 'fiddle'

MAX_STRING_SIZE = 100
LARGE_STRING_MAX = 100_000
ALLOCATIONS = 12_000_000
RETAINED = 600_000
CHUNK_LIMIT = 200_000
MISMATCH_EXIT = 86

# The file that maps the code of `symbol` as the dynamic linker resolves it
# for this process (the same lookup as dladdr(dlsym(RTLD_DEFAULT, symbol))).
def object_defining(symbol)
  address = Fiddle::Handle::DEFAULT[symbol]
  File.foreach('/proc/self/maps') do |line|
    range, _perms, _offset, _device, _inode, path = line.split
    low, high = range.split('-').map { |hex| hex.to_i(16) }
    return path || '[anonymous]' if address >= low && address < high
  end
  '?'
end

def check_allocator!
  expected = ENV.fetch('XBENCH_EXPECT', '')
  found = object_defining('malloc')
  warn "malloc_lib=#{found}"
  return if expected.empty? || found.include?(expected)

  warn 'stress_mem.rb: ALLOCATOR MISMATCH: expected malloc from an object matching ' \
       "\"#{expected}\", but it comes from \"#{found}\" (is LD_PRELOAD set correctly?)"
  exit MISMATCH_EXIT
end

def resident_kb
  File.foreach('/proc/self/status') do |line|
    return line.split[1].to_i if line.start_with?('VmRSS:')
  end
  -1
end

# One thread's share of the work.
class Stressor
  def initialize(seed, retained)
    @rng = Random.new(seed)
    @retained = retained
  end

  def run(allocations, retains, chunk_limit)
    chunk = []
    while allocations.positive? || retains.positive?
      if retains.zero? || (allocations.positive? && @rng.rand < 0.5)
        chunk << (' ' * @rng.rand(MAX_STRING_SIZE))
        allocations -= 1
        chunk = [' ' * @rng.rand(LARGE_STRING_MAX)] if chunk.length > chunk_limit
      else
        @retained << (' ' * @rng.rand(MAX_STRING_SIZE))
        retains -= 1
      end
    end
  end
end

check_allocator!
scale = ARGV.fetch(0, '1.0').to_f
threads = [1, ENV['STRESS_THREADS'].to_i].max
allocations = (ALLOCATIONS * scale / threads).to_i
retains = (RETAINED * scale / threads).to_i
chunk_limit = (CHUNK_LIMIT * scale / threads).to_i

retained = []
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
workers = Array.new(threads) do |index|
  Thread.new { Stressor.new(1 + index, retained).run(allocations, retains, chunk_limit) }
end
workers.each(&:join)
duration = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

puts "#{resident_kb},#{duration}"
