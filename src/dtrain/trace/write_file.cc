// write_file: the one place trace/ touches the file system. Binary mode, so the SVG and JSON
// bytes land exactly as rendered.
#include "dtrain/trace/write_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "dtrain/core/check.h"

namespace dtrain::trace {

void write_file(const std::string& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  DTRAIN_CHECK(out.good(), "cannot write ", path, ": ", std::strerror(errno));
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  DTRAIN_CHECK(!out.fail(), "cannot write ", path, ": ", std::strerror(errno));
}

}  // namespace dtrain::trace
