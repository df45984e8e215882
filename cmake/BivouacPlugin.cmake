# bivouac_add_plugin(KIND NAME SOURCES... [LIBS ...])
# Builds <kind>_<name>.so into the build tree's plugin directory and installs it. Also
# makes an object library bv_<kind>_<name>_objs so the plugin's own tests can link its code.
function(bivouac_add_plugin kind name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  set(target "${kind}_${name}")
  add_library(bv_${target}_objs OBJECT ${P_SOURCES})
  target_link_libraries(bv_${target}_objs PUBLIC bivouac ${P_LIBS})
  target_compile_options(bv_${target}_objs PRIVATE -fvisibility=hidden)
  add_library(${target} MODULE $<TARGET_OBJECTS:bv_${target}_objs>)
  target_link_libraries(${target} PRIVATE bivouac ${P_LIBS})
  set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME "${target}"
    LIBRARY_OUTPUT_DIRECTORY "${BIVOUAC_BUILD_PLUGIN_DIR}"
    INSTALL_RPATH "$ORIGIN/../..")
  install(TARGETS ${target} LIBRARY DESTINATION "${BIVOUAC_PLUGIN_DIR_REL}")
endfunction()
