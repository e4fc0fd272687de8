// Runs files through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer,
// so that the committed seed corpus and the regression inputs are ordinary
// tests under any compiler and sanitizer. Arguments are directories (every
// regular file in them, in name order) or files; a missing directory counts as
// empty (a target may have no regressions yet), but running nothing at all
// fails.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool run_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: failed to read %s\n", path.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A buffer of exactly the input's size, so that a sanitizer sees any read past it.
  std::unique_ptr<uint8_t[]> data(new uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
  std::copy(bytes.begin(), bytes.end(), data.get());
  std::fprintf(stderr, "fuzz replay: %s\n", path.c_str());
  LLVMFuzzerTestOneInput(data.get(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    std::vector<fs::path> files;
    if (fs::is_directory(arg, ec)) {
      for (const auto& entry : fs::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
    } else if (fs::exists(arg, ec)) {
      files.push_back(arg);
    }
    size_t ran = 0;
    for (const auto& f : files) {
      if (!run_file(f)) return 1;
      ++ran;
    }
    std::printf("%s: %zu inputs\n", argv[i], ran);
    total += ran;
  }
  std::printf("ran %zu inputs\n", total);
  return total > 0 ? 0 : 1;
}
