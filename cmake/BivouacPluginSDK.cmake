# BivouacPluginSDK.cmake: building bivouac plugins out of tree, against an installed SDK.
# Included by bivouacConfig.cmake, so after find_package(bivouac) a plugin project writes
#
#   bivouac_add_plugin(model mlp SOURCES model_mlp.c)
#
# and gets model_mlp.so: a MODULE library with no "lib" prefix (the registry reads the kind
# and name from the file name), compiled with -fvisibility=hidden so that only the entry
# symbol bv_model_mlp_plugin (marked BV_PLUGIN_EXPORT) is exported, linked to
# libbivouac.so with --no-undefined (a typo in an SDK call fails the link, not the
# dlopen), and with an RPATH to the libdir of the bivouac it was built against.
#
# bivouac_add_plugin(KIND NAME SOURCES src... [LIBS lib...]
#                    [OUTPUT_DIRECTORY dir] [INSTALL_DESTINATION dir])
#   KIND                 model | compute | transport | resilience | cloud
#   LIBS                 extra libraries for the plugin (e.g. PkgConfig::ZMQ)
#   OUTPUT_DIRECTORY     where the .so is built; default ${CMAKE_BINARY_DIR}/plugins, a
#                        directory to put on BIVOUAC_PLUGIN_PATH while developing
#   INSTALL_DESTINATION  default ${CMAKE_INSTALL_LIBDIR}/bivouac/plugins under the plugin
#                        project's own CMAKE_INSTALL_PREFIX (use ${bivouac_PLUGIN_DIR} to
#                        install next to bivouac's own plugins)
# The target is named <kind>_<name>, so target_compile_definitions() etc. work on it.

include_guard(GLOBAL)
include(GNUInstallDirs)

# libbivouac's directory, for the plugins' RPATH: this file sits in <libdir>/cmake/bivouac.
get_filename_component(_bivouac_sdk_libdir "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
set_property(GLOBAL PROPERTY BIVOUAC_SDK_LIBDIR "${_bivouac_sdk_libdir}")
unset(_bivouac_sdk_libdir)

function(bivouac_add_plugin kind name)
  cmake_parse_arguments(P "" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES;LIBS" ${ARGN})
  set(kinds model compute transport resilience cloud)
  if(NOT kind IN_LIST kinds)
    message(FATAL_ERROR
      "bivouac_add_plugin: kind '${kind}' is not one of: ${kinds}")
  endif()
  if(NOT name MATCHES "^[a-z0-9][a-z0-9_]*$")
    message(FATAL_ERROR "bivouac_add_plugin: plugin name '${name}' must be lower-case "
      "letters, digits and '_' (it is part of the file and symbol names)")
  endif()
  if(NOT P_SOURCES)
    message(FATAL_ERROR "bivouac_add_plugin(${kind} ${name}): no SOURCES")
  endif()
  if(NOT TARGET bivouac::bivouac)
    message(FATAL_ERROR "bivouac_add_plugin: call find_package(bivouac) first")
  endif()
  if(NOT P_OUTPUT_DIRECTORY)
    set(P_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/plugins")
  endif()
  if(NOT P_INSTALL_DESTINATION)
    set(P_INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/bivouac/plugins")
  endif()
  get_property(libdir GLOBAL PROPERTY BIVOUAC_SDK_LIBDIR)

  set(target "${kind}_${name}")
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE bivouac::bivouac ${P_LIBS})
  target_compile_options(${target} PRIVATE -fvisibility=hidden)
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  set_target_properties(${target} PROPERTIES
    PREFIX "" SUFFIX ".so" OUTPUT_NAME "${target}"
    C_STANDARD 17 C_STANDARD_REQUIRED ON
    POSITION_INDEPENDENT_CODE ON
    C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY "${P_OUTPUT_DIRECTORY}"
    # The same RPATH in the build tree and installed (no rewriting on install).
    BUILD_WITH_INSTALL_RPATH ON
    INSTALL_RPATH "${libdir}")
  install(TARGETS ${target} LIBRARY DESTINATION "${P_INSTALL_DESTINATION}")
endfunction()
