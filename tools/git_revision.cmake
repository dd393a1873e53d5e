# Writes OUT (a C++ header defining H3_GIT_REVISION) from `git describe` of SRC, rewriting it only when the
# revision changed so that an unchanged tree relinks nothing. Run at every build (tools/CMakeLists.txt); a tree
# that is not a git checkout says "unknown".
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR rev STREQUAL "")
  set(rev "unknown")
else()
  # Tracked files changed since the commit (untracked ones do not count).
  execute_process(COMMAND git -C "${SRC}" diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    set(rev "${rev}-dirty")
  endif()
endif()
set(text "#pragma once\n#define H3_GIT_REVISION \"${rev}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
