// ddp_probe: what one task of a step sees. Prints one line of key=value pairs:
// host, the task's non-loopback IPv4 addresses, the rendezvous variables (or
// <unset>), and a fingerprint of SLURMDDP_TOKEN (never the token itself).
//
//   ddp_probe [--meet DIR N]   also write this step's MASTER_PORT into DIR and wait
//                              (up to 30 s) until N steps have done so, to prove
//                              that N steps ran at the same time.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace {

std::string env_or_unset(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "<unset>";
}

std::string ipv4_addresses() {
  ifaddrs* list = nullptr;
  std::string out;
  if (getifaddrs(&list) != 0) return "?";
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || p->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr, buf, sizeof buf);
    if (std::strncmp(buf, "127.", 4) == 0) continue;
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  freeifaddrs(list);
  return out.empty() ? "none" : out;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string line = std::string("host=") + host + " ips=" + ipv4_addresses();
  for (const char* v : {"RANK",
                        "LOCAL_RANK",
                        "WORLD_SIZE",
                        "LOCAL_WORLD_SIZE",
                        "NODE_RANK",
                        "GROUP_RANK",
                        "MASTER_ADDR",
                        "MASTER_PORT",
                        "SLURMDDP_MASTER",
                        "SLURMDDP_LOCAL_DEVICE",
                        "SLURMDDP_STEP",
                        "SLURMDDP_NUM_NODES",
                        "CUDA_VISIBLE_DEVICES",
                        "NCCL_SOCKET_IFNAME",
                        "GLOO_SOCKET_IFNAME",
                        "SLURM_PROCID",
                        "SLURM_LOCALID",
                        "SLURM_NODEID",
                        "SLURM_STEP_ID",
                        "SLURM_STEP_RESV_PORTS",
                        "ROCR_VISIBLE_DEVICES",
                        "HIP_VISIBLE_DEVICES",
                        "SLURMD_TRES_BIND",
                        "OMP_NUM_THREADS",
                        "MKL_NUM_THREADS",
                        "OPENBLAS_NUM_THREADS"}) {
    line += std::string(" ") + v + "=" + env_or_unset(v);
  }
  const char* token = std::getenv("SLURMDDP_TOKEN");
  if (token != nullptr) {
    char fp[32];
    std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(fnv1a(token)));
    line += std::string(" TOKEN_FP=") + fp + " TOKEN_LEN=" + std::to_string(std::strlen(token));
  } else {
    line += " TOKEN_FP=<unset> TOKEN_LEN=0";
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);

  if (argc == 4 && std::string(argv[1]) == "--meet") {
    namespace fs = std::filesystem;
    fs::path dir = argv[2];
    int want = std::atoi(argv[3]);
    std::string step = env_or_unset("SLURM_STEP_ID");
    std::ofstream(dir / ("step-" + step)) << env_or_unset("MASTER_PORT") << "\n";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (true) {
      int n = 0;
      for (const auto& e : fs::directory_iterator(dir))
        n += e.path().filename().string().rfind("step-", 0) == 0;
      if (n >= want) break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "ddp_probe: only %d of %d steps met in %s\n", n, want, argv[2]);
        return 3;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling another step
    }
  }
  return 0;
}
