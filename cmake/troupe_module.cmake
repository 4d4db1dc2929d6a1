# One helper adds a module's library, its unit tests and its benchmarks.
#
#   troupe_add_module(NAME DIR DEPS dep... [PRIVATE_DEPS dep...] [CUDA_DEPS dep...])
#
# Sources are every *.cpp under DIR except tests, benchmarks and programs; they
# form the library troupe_NAME. Everything under a `cuda/` folder (*.cpp and
# *.cu) forms a second library, troupe_NAME_cuda, built only when the toolkit is
# found: programs that never touch a GPU do not link it, so they do not pay for
# loading cuBLAS (about 3 s and 200 MB per process).
#
# Each foo.test.cpp becomes a CTest entry; its label is "slow" when the file is
# foo.slow.test.cpp, "gpu" for foo.gpu.test.cpp and "quick" otherwise. Each
# foo.bench.cpp becomes an executable bench_foo (not run by CTest). Tests and
# benchmarks under `cuda/` link troupe_NAME_cuda. A sanitizer build (TROUPE_SANITIZE)
# adds neither slow tests nor benchmarks.
function(troupe_add_module name dir)
  cmake_parse_arguments(arg "" "" "DEPS;PRIVATE_DEPS;CUDA_DEPS" ${ARGN})
  file(GLOB_RECURSE all CONFIGURE_DEPENDS "${dir}/*.cpp" "${dir}/*.cu")
  list(FILTER all EXCLUDE REGEX "/node_modules/")  # the dashboard front end's npm packages
  set(sources "")
  set(cuda_sources "")
  set(tests "")
  set(benches "")
  foreach(f IN LISTS all)
    if(f MATCHES "/cuda/" AND NOT TROUPE_HAVE_CUDA)
      continue()  # CUDA code is only built with the toolkit
    elseif(f MATCHES "\\.test\\.(cpp|cu)$")
      list(APPEND tests "${f}")
    elseif(f MATCHES "\\.bench\\.(cpp|cu)$")
      list(APPEND benches "${f}")
    elseif(f MATCHES "/main\\.cpp$" OR f MATCHES "/plugin/")
      # programs and example plugins are added by their folder's CMakeLists
    elseif(f MATCHES "/cuda/")
      list(APPEND cuda_sources "${f}")
    elseif(f MATCHES "\\.cpp$")
      list(APPEND sources "${f}")
    endif()
  endforeach()
  if(NOT TROUPE_HAVE_CUDA)
    list(FILTER tests EXCLUDE REGEX "\\.gpu\\.test\\.")
  endif()
  if(TROUPE_SANITIZE OR TROUPE_TSAN)
    # The sanitizer build runs the quick suite only (deploy/dev.sh test): it compiles
    # no slow test and no benchmark, about a fifth of the test programs.
    list(FILTER tests EXCLUDE REGEX "\\.slow\\.test\\.")
    set(benches "")
  endif()

  if(sources)
    add_library(troupe_${name} ${sources})
    target_include_directories(troupe_${name} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(troupe_${name} PUBLIC ${arg_DEPS})
    # Libraries only the module's own sources include (their flags stay off dependents).
    target_link_libraries(troupe_${name} PRIVATE ${arg_PRIVATE_DEPS})
  else()  # a module with headers only (or none yet)
    add_library(troupe_${name} INTERFACE)
    target_include_directories(troupe_${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(troupe_${name} INTERFACE ${arg_DEPS})
  endif()
  if(cuda_sources)
    add_library(troupe_${name}_cuda ${cuda_sources})
    target_link_libraries(troupe_${name}_cuda PUBLIC troupe_${name} ${arg_CUDA_DEPS})
    target_compile_definitions(troupe_${name}_cuda PUBLIC TROUPE_HAVE_CUDA=1)
  endif()

  foreach(t IN LISTS tests)
    get_filename_component(base "${t}" NAME)
    string(REGEX REPLACE "\\.(slow\\.|gpu\\.)?test\\.(cpp|cu)$" "" base "${base}")
    set(exe test_${name}_${base})
    add_executable(${exe} "${t}")
    if(t MATCHES "/cuda/" AND TARGET troupe_${name}_cuda)
      target_link_libraries(${exe} PRIVATE troupe_${name}_cuda troupe_doctest_main)
    else()
      target_link_libraries(${exe} PRIVATE troupe_${name} troupe_doctest_main)
    endif()
    # Test programs are glue around the libraries, which keep their own flags: at
    # -O1 they compile in about two thirds of the -O3 time (measured on
    # integration/zero.test.cpp: 42 s at -O3, 29 s at -O1) and run the same.
    target_compile_options(${exe} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O1>)
    add_test(NAME ${name}.${base} COMMAND ${exe})
    set_tests_properties(${name}.${base} PROPERTIES
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
      ENVIRONMENT "TROUPE_BUILD_DIR=${PROJECT_BINARY_DIR};UBSAN_OPTIONS=${TROUPE_UBSAN_OPTIONS};TSAN_OPTIONS=${TROUPE_TSAN_OPTIONS}")
    if(TROUPE_TSAN)
      # UCX's memory hooks (libucm) intercept a finished thread's madvise and call
      # TSan's rwlock interceptor after its thread state is gone (SIGSEGV at exit).
      set_property(TEST ${name}.${base} APPEND PROPERTY ENVIRONMENT UCX_MEM_EVENTS=no)
    endif()
    if(t MATCHES "\\.slow\\.test\\.")
      set_tests_properties(${name}.${base} PROPERTIES LABELS slow)
    elseif(t MATCHES "\\.gpu\\.test\\.")
      set_tests_properties(${name}.${base} PROPERTIES LABELS gpu)
    else()
      set_tests_properties(${name}.${base} PROPERTIES LABELS quick)
    endif()
  endforeach()
  foreach(b IN LISTS benches)
    get_filename_component(base "${b}" NAME)
    string(REGEX REPLACE "\\.bench\\.(cpp|cu)$" "" base "${base}")
    add_executable(bench_${base} "${b}")
    if(b MATCHES "/cuda/" AND TARGET troupe_${name}_cuda)
      target_link_libraries(bench_${base} PRIVATE troupe_${name}_cuda)
    else()
      target_link_libraries(bench_${base} PRIVATE troupe_${name})
    endif()
  endforeach()
endfunction()
