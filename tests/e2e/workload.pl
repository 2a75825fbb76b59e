# A Perl workload for the e2e test: hashes, arrays, sorting, regexes, string
# building. Prints a digest that must not depend on the allocator.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

my $ctx = Digest::MD5->new;
my %h;
for my $i (1 .. 200000) {
    $h{"key$i"} = [ $i, "value" x ($i % 17), { n => $i * 3 } ];
}
delete $h{"key$_"} for grep { $_ % 3 == 0 } 1 .. 200000;
$ctx->add(scalar(keys %h));

my @words = map { sprintf("%08x", ($_ * 2654435761) % 4294967296) } 1 .. 100000;
my @sorted = sort @words;
$ctx->add(join(",", @sorted[0 .. 99]));

my $text = join("\n", map { "line $_: " . ("abc" x ($_ % 20)) } 1 .. 50000);
my $count = () = $text =~ /(abc){3,}/g;
(my $changed = $text) =~ s/line (\d+)/L$1/g;
$ctx->add($count, length($changed));

my @stack;
for my $round (1 .. 50) {
    push @stack, [ map { "s$round-$_" x 3 } 1 .. 2000 ];
    splice(@stack, 0, 10) if @stack > 20;
}
$ctx->add(scalar(@stack), length(join("", map { @$_ } @stack)));

print "perl workload: ", $ctx->hexdigest, "\n";
