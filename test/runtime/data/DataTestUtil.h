//===- DataTestUtil.h - Scratch directories and raw files for data tests --===//
#ifndef MOERT_TEST_DATA_DATATESTUTIL_H
#define MOERT_TEST_DATA_DATATESTUTIL_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace moert::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its files.
class ScratchDir {
public:
  ScratchDir() {
    const char *Base = std::getenv("TMPDIR");
    std::string Tmpl = std::string(Base && *Base ? Base : "/tmp") + "/moert-data-XXXXXX";
    std::vector<char> Buf(Tmpl.begin(), Tmpl.end());
    Buf.push_back('\0');
    if (mkdtemp(Buf.data()))
      Path = Buf.data();
  }
  ~ScratchDir() {
    if (Path.empty())
      return;
    if (DIR *D = opendir(Path.c_str())) {
      while (dirent *E = readdir(D))
        if (std::strcmp(E->d_name, ".") && std::strcmp(E->d_name, ".."))
          std::remove((Path + "/" + E->d_name).c_str());
      closedir(D);
    }
    rmdir(Path.c_str());
  }
  std::string file(const std::string &Name) const { return Path + "/" + Name; }
  std::string Path;
};

inline std::vector<unsigned char> readBytes(const std::string &Path) {
  std::ifstream In(Path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(In), {});
}

inline void writeBytes(const std::string &Path, const std::vector<unsigned char> &Bytes) {
  std::ofstream Out(Path, std::ios::binary | std::ios::trunc);
  Out.write(reinterpret_cast<const char *>(Bytes.data()), std::streamsize(Bytes.size()));
}

inline bool exists(const std::string &Path) { return access(Path.c_str(), F_OK) == 0; }

} // namespace moert::test

#endif
