// libempty.so: a preloaded library that defines nothing of an allocator.
// bench/startup.py preloads it beside xalloc and no preload at all: what a
// process pays for loading any library with LD_PRELOAD (mapping the file,
// the loader's lookups through one more object) is the loader's cost, and
// xalloc's own start-up is what a preload of libxalloc.so adds on top of
// this one. Linked with libxalloc.so's link options (bench/CMakeLists.txt).
void xbench_empty_library(void);
void xbench_empty_library(void) {}
