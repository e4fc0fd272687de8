// The store's socket helpers where they wait: sending to a peer that never
// reads ends at the deadline, naming the peer, instead of spinning on EAGAIN.
#include "store/socket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "time_scale.h"

namespace slurmddp::store {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

TEST(SendBefore, APeerThatNeverReadsFailsAtTheDeadlineNamingIt) {
  uint16_t port = 0;
  Fd listener = listen_tcp("127.0.0.1", 0, &port);
  std::string why;
  Fd client = connect_once("127.0.0.1", port, Clock::now() + std::chrono::seconds(5), &why);
  ASSERT_TRUE(client.valid()) << why;
  // The peer accepts and never reads; small buffers on both sides.
  Fd peer;
  for (int i = 0; i < 500 && !peer.valid(); ++i) {
    peer = Fd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!peer.valid()) ::usleep(1000);
  }
  ASSERT_TRUE(peer.valid());
  int small = 4096;
  setsockopt(client.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  setsockopt(peer.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  // Fill both buffers until the kernel takes no more.
  std::vector<uint8_t> chunk(size_t{64} * 1024, 0x5a);
  for (;;) {
    ssize_t n = ::send(client.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    ASSERT_GT(n, 0) << std::strerror(errno);
  }
  const std::vector<uint8_t> frame(41, 0x01);  // a handshake frame's size
  const auto start = Clock::now();
  why = send_before(client.get(), frame.data(), frame.size(), start + milliseconds(300));
  const auto took = Clock::now() - start;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, support::scaled(milliseconds(2000)));
  EXPECT_THAT(why, HasSubstr("the peer did not read what was sent before the deadline; peer=" +
                             format_endpoint("127.0.0.1", port) + ", sent 0 of 41 bytes"));
  // A peer that reads gets everything at once.
  Fd fresh = connect_once("127.0.0.1", port, Clock::now() + std::chrono::seconds(5), &why);
  ASSERT_TRUE(fresh.valid()) << why;
  EXPECT_EQ(send_before(fresh.get(), frame.data(), frame.size(), Clock::now() + milliseconds(300)),
            "");
}

}  // namespace
}  // namespace slurmddp::store
