# wmap_add_plugin(NAME SOURCES...): builds a wmap plugin (a MODULE library with hidden
# visibility) into the build tree's plugin folder and installs it beside the others.
# Installed with the package, so out-of-tree plugins use it too.
function(wmap_add_plugin name)
  add_library(${name} MODULE ${ARGN})
  target_link_libraries(${name} PRIVATE wmap::wmap)
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(DEFINED WMAP_PLUGIN_OUTPUT_DIR)
    # In wmap's own tree, built where it is installed relative to libwmap: the install RPATH
    # serves both (a padded build RPATH would search $PWD: core/CMakeLists.txt).
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${WMAP_PLUGIN_OUTPUT_DIR}
                                             BUILD_WITH_INSTALL_RPATH ON)
  endif()
  # Installed plugins live in <libdir>/wmap/plugins and find libwmap two folders up.
  set_target_properties(${name} PROPERTIES INSTALL_RPATH "$ORIGIN/../..;${CMAKE_INSTALL_RPATH}")
  if(NOT DEFINED WMAP_PLUGIN_INSTALL_DIR)
    include(GNUInstallDirs)
    set(WMAP_PLUGIN_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/wmap/plugins)
  endif()
  install(TARGETS ${name} LIBRARY DESTINATION ${WMAP_PLUGIN_INSTALL_DIR})
  # Collected so test targets can depend on every plugin they may load.
  set_property(GLOBAL APPEND PROPERTY WMAP_PLUGIN_TARGETS ${name})
endfunction()
