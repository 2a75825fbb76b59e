# Installation, the CMake package, pkg-config files and the Debian package.
#
# Included from the top-level CMakeLists.txt once the library targets exist:
#
#   include(cmake/XallocInstall.cmake)
#
# What `cmake --install build [--prefix DIR]` puts under the prefix
# (LIBDIR is CMAKE_INSTALL_LIBDIR: lib, or lib/x86_64-linux-gnu when the
# prefix is /usr on Debian):
#
#   include/xalloc/xalloc.h
#   LIBDIR/libxalloc.so.0.1.0, libxalloc.so.0, libxalloc.so   (target xalloc)
#   LIBDIR/libxalloc.a                                         (xalloc_static)
#   LIBDIR/libxalloc-api.a                                     (xalloc_api)
#   LIBDIR/libxalloc-secure.so*       (xalloc_secure, the hardened build, if defined)
#   LIBDIR/cmake/xalloc/xallocConfig.cmake, ...ConfigVersion.cmake,
#                       xallocTargets*.cmake
#       find_package(xalloc) -> xalloc::xalloc, xalloc::xalloc-static,
#                               xalloc::xalloc-api (and xalloc::xalloc-secure)
#   LIBDIR/pkgconfig/xalloc.pc, xalloc-static.pc, xalloc-api.pc
#   bin/xalloc-run
#   share/doc/xalloc/        README.md, docs/*.md, examples/
#
# Everything installed is relocatable: the CMake package and the pkg-config
# files locate the prefix from their own location, and xalloc-run finds the
# library relative to itself, so the same tree works under any prefix, in
# the .deb (which installs under /usr) and unpacked with dpkg -x.
#
# `cpack -G DEB` (or plain `cpack`) in the build directory makes
# xalloc_<version>_amd64.deb with all of the above under /usr.
#
# In a configuration with XALLOC_SANITIZE only xalloc_api exists; then only
# it, the header and the CMake package (xalloc::xalloc-api) are installed.

include_guard(GLOBAL)

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Off when xalloc is a subproject (add_subdirectory) of another project: the
# parent decides what it installs and packages.
option(XALLOC_INSTALL "Generate xalloc's install rules, CMake package and CPack configuration" ${PROJECT_IS_TOP_LEVEL})

# The namespaced names also work inside a build that includes xalloc with
# add_subdirectory, so a consumer's target_link_libraries line is the same
# either way.
set(_xalloc_exported_targets "")
# (xalloc_secure, libxalloc-secure.so, the hardened build, where it exists.)
foreach(_xalloc_pair IN ITEMS "xalloc=xalloc" "xalloc_static=xalloc-static" "xalloc_api=xalloc-api"
                              "xalloc_secure=xalloc-secure")
  string(REPLACE "=" ";" _xalloc_pair "${_xalloc_pair}")
  list(GET _xalloc_pair 0 _xalloc_target)
  list(GET _xalloc_pair 1 _xalloc_export_name)
  if(TARGET ${_xalloc_target})
    set_target_properties(${_xalloc_target} PROPERTIES EXPORT_NAME ${_xalloc_export_name})
    if(NOT TARGET xalloc::${_xalloc_export_name})
      add_library(xalloc::${_xalloc_export_name} ALIAS ${_xalloc_target})
    endif()
    list(APPEND _xalloc_exported_targets ${_xalloc_target})
  endif()
endforeach()

if(TARGET xalloc_static)
  # A static malloc replacement only replaces what the linker pulls out of
  # the archive, and an archive member is pulled only for a symbol that is
  # still undefined when the archive is scanned. Naming malloc (the C entry
  # points, shim/malloc_override.cpp) and operator new(size_t) (the C++
  # ones, shim/new_delete.cpp) as undefined up front makes both members part
  # of every program that links xalloc::xalloc-static, wherever the archive
  # lands on the link line and even when the program itself never calls
  # malloc (its libraries still do). The rest of the archive follows from
  # their references.
  target_link_options(xalloc_static INTERFACE -Wl,--undefined=malloc -Wl,--undefined=_Znwm)
endif()

if(NOT XALLOC_INSTALL)
  return()
endif()

# The CMake package directory, and the prefix as seen from other install
# directories (for the relocatable pkg-config files and xalloc-run).
set(XALLOC_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/xalloc" CACHE STRING
  "Where the xalloc CMake package is installed (relative to the prefix)")
mark_as_advanced(XALLOC_INSTALL_CMAKEDIR)

# _xalloc_relative_dir(OUT FROM TO): TO as seen from FROM, both install
# directories (relative to the prefix, or absolute). An absolute TO stays
# absolute.
function(_xalloc_relative_dir out from to)
  if(IS_ABSOLUTE "${to}")
    set(${out} "${to}" PARENT_SCOPE)
    return()
  endif()
  if(IS_ABSOLUTE "${from}")
    set(${out} "${CMAKE_INSTALL_PREFIX}/${to}" PARENT_SCOPE)
    return()
  endif()
  # Any root works: both paths hang under the same prefix.
  file(RELATIVE_PATH rel "/xalloc-prefix/${from}" "/xalloc-prefix/${to}")
  string(REGEX REPLACE "/+$" "" rel "${rel}")
  if(rel STREQUAL "")
    set(rel ".")
  endif()
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

set(_xalloc_gen "${PROJECT_BINARY_DIR}/xalloc-install")

# --- headers and libraries ------------------------------------------------------

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/xalloc"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  COMPONENT Development
  FILES_MATCHING PATTERN "*.h")

install(TARGETS ${_xalloc_exported_targets}
  EXPORT xallocTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Runtime NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Development
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT Runtime)

# --- CMake package: find_package(xalloc) ----------------------------------------

install(EXPORT xallocTargets
  NAMESPACE xalloc::
  FILE xallocTargets.cmake
  DESTINATION "${XALLOC_INSTALL_CMAKEDIR}"
  COMPONENT Development)

configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/xallocConfig.cmake.in"
  "${_xalloc_gen}/xallocConfig.cmake"
  INSTALL_DESTINATION "${XALLOC_INSTALL_CMAKEDIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR)

write_basic_package_version_file(
  "${_xalloc_gen}/xallocConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)

install(FILES "${_xalloc_gen}/xallocConfig.cmake" "${_xalloc_gen}/xallocConfigVersion.cmake"
  DESTINATION "${XALLOC_INSTALL_CMAKEDIR}"
  COMPONENT Development)

# --- pkg-config -------------------------------------------------------------------

set(XALLOC_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
# prefix=${pcfiledir}/<this>: the files work wherever the tree is installed.
_xalloc_relative_dir(XALLOC_PC_PREFIX_FROM_PCDIR "${XALLOC_INSTALL_PKGCONFIGDIR}" ".")
if(NOT IS_ABSOLUTE "${XALLOC_PC_PREFIX_FROM_PCDIR}")
  set(XALLOC_PC_PREFIX "\${pcfiledir}/${XALLOC_PC_PREFIX_FROM_PCDIR}")
else()
  set(XALLOC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
endif()
foreach(_xalloc_dir IN ITEMS LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_xalloc_dir}}")
    set(XALLOC_PC_${_xalloc_dir} "${CMAKE_INSTALL_${_xalloc_dir}}")
  else()
    set(XALLOC_PC_${_xalloc_dir} "\${prefix}/${CMAKE_INSTALL_${_xalloc_dir}}")
  endif()
endforeach()

set(_xalloc_pc_files "")
if(TARGET xalloc)
  list(APPEND _xalloc_pc_files xalloc)
endif()
if(TARGET xalloc_static)
  list(APPEND _xalloc_pc_files xalloc-static)
endif()
if(TARGET xalloc_api)
  list(APPEND _xalloc_pc_files xalloc-api)
endif()
foreach(_xalloc_pc IN LISTS _xalloc_pc_files)
  configure_file("${CMAKE_CURRENT_LIST_DIR}/${_xalloc_pc}.pc.in" "${_xalloc_gen}/${_xalloc_pc}.pc" @ONLY)
  install(FILES "${_xalloc_gen}/${_xalloc_pc}.pc"
    DESTINATION "${XALLOC_INSTALL_PKGCONFIGDIR}"
    COMPONENT Development)
endforeach()

# --- xalloc-run -------------------------------------------------------------------

if(TARGET xalloc)
  # The installed copy knows where the library lies relative to it; the one
  # in tools/ searches the usual places (and ../build in a source tree).
  _xalloc_relative_dir(XALLOC_RUN_LIBDIR "${CMAKE_INSTALL_BINDIR}" "${CMAKE_INSTALL_LIBDIR}")
  configure_file("${PROJECT_SOURCE_DIR}/tools/xalloc-run" "${_xalloc_gen}/xalloc-run" @ONLY)
  install(PROGRAMS "${_xalloc_gen}/xalloc-run"
    DESTINATION "${CMAKE_INSTALL_BINDIR}"
    COMPONENT Runtime)
endif()

# --- documentation and examples ---------------------------------------------------

file(GLOB _xalloc_docs "${PROJECT_SOURCE_DIR}/docs/*.md")
install(FILES "${PROJECT_SOURCE_DIR}/README.md" ${_xalloc_docs}
  DESTINATION "${CMAKE_INSTALL_DOCDIR}"
  COMPONENT Documentation)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/examples"
  DESTINATION "${CMAKE_INSTALL_DOCDIR}"
  COMPONENT Documentation
  USE_SOURCE_PERMISSIONS
  # what building an example in place leaves
  PATTERN "build" EXCLUDE
  PATTERN ".gitignore" EXCLUDE
  REGEX "/(ld_preload/probe|link_shared/app|static_override/app)$" EXCLUDE)

# --- CPack: the Debian package ----------------------------------------------------
#
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
#   cmake --build build -j
#   (cd build && cpack -G DEB)      ->  build/xalloc_<version>_amd64.deb

set(CPACK_PACKAGE_NAME "xalloc")
set(CPACK_PACKAGE_VENDOR "xalloc developers")
set(CPACK_PACKAGE_CONTACT "xalloc developers")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "fast general-purpose malloc replacement for x86-64 Linux")
# The Debian control file's extended description: CPack indents each line.
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "xalloc replaces malloc, free and the rest of the C allocation API and\n"
  "every C++ operator new and delete. It serves small blocks from\n"
  "per-thread caches without locks, returns blocks freed by other threads\n"
  "to their owners, gives unused memory back to the OS and reports double\n"
  "and invalid frees.\n"
  "\n"
  "Use it with LD_PRELOAD (the xalloc-run launcher), by linking\n"
  "libxalloc.so or libxalloc.a, or through its prefixed xalloc_* API.\n"
  "This package holds the shared and static libraries, the header, the\n"
  "CMake package (find_package(xalloc)), pkg-config files, xalloc-run,\n"
  "the documentation and examples.")
set(CPACK_PACKAGE_INSTALL_DIRECTORY "xalloc")
if(NOT CPACK_GENERATOR)
  set(CPACK_GENERATOR "DEB")
endif()
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")

set(CPACK_DEBIAN_PACKAGE_NAME "xalloc")
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")  # xalloc_<version>_amd64.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "xalloc developers")
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE "amd64")
set(CPACK_DEBIAN_PACKAGE_SECTION "libs")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# A shlibs file for packages built against it, and the ldconfig trigger.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# The C library is the only dependency; dpkg-shlibdeps (dpkg-dev) derives
# the minimum version from the symbols libxalloc.so uses. Without it the
# version below is the one the current sources need (GLIBC_2.34).
find_program(XALLOC_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(XALLOC_DPKG_SHLIBDEPS)
if(XALLOC_DPKG_SHLIBDEPS AND TARGET xalloc)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34)")
endif()

include(CPack)

unset(_xalloc_gen)
unset(_xalloc_pc_files)
unset(_xalloc_docs)
