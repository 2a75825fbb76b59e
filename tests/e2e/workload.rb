# A Ruby workload for the e2e test. Prints a digest that must not depend on
# the allocator.
require "digest"
require "json"

d = Digest::SHA256.new
h = {}
200_000.times { |i| h["key#{i}"] = [i, "v" * (i % 40), { n: i }] }
(0...200_000).step(3) { |i| h.delete("key#{i}") }
d << h.size.to_s
doc = (0...20_000).map { |i| { "id" => i, "name" => "item #{i}", "tags" => ["t#{i % 7}"] * (i % 5) } }
text = JSON.generate(doc)
d << Digest::SHA256.hexdigest(text)
raise "json round trip" unless JSON.parse(text) == doc
words = (1..100_000).map { |i| format("%08x", (i * 2654435761) % 2**32) }.sort
d << words.each_slice(97).map(&:first).join
threads = 4.times.map do |k|
  Thread.new { (1..50_000).map { |i| "t#{k}-#{i}" * (1 + i % 3) }.map(&:size).sum }
end
d << threads.map(&:value).inspect
GC.start
puts "ruby workload: #{d.hexdigest}"
