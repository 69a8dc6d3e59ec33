// CommunicatorWorkers: the data tools' collectives over a Communicator (see communicator_workers.h).
#include "myriad/train/data/communicator_workers.h"

#include <algorithm>
#include <cstring>

#include "myriad/core/error.h"

namespace myriad::train {

std::vector<std::int64_t> CommunicatorWorkers::gather_sizes(std::int64_t mine) {
  Tensor one = Tensor::full({1}, static_cast<double>(mine), DType::i64);
  Tensor all = Tensor::empty({size()}, DType::i64);
  group_.all_gather(one, all);
  return std::vector<std::int64_t>(all.data<std::int64_t>(), all.data<std::int64_t>() + size());
}

std::vector<std::vector<std::int64_t>> CommunicatorWorkers::all_gather(const std::vector<std::int64_t>& mine) {
  const std::vector<std::int64_t> sizes = gather_sizes(static_cast<std::int64_t>(mine.size()));
  const std::int64_t widest = std::max<std::int64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  Tensor padded = Tensor::zeros({widest}, DType::i64);
  std::copy(mine.begin(), mine.end(), padded.data<std::int64_t>());
  Tensor all = Tensor::empty({widest * size()}, DType::i64);
  group_.all_gather(padded, all);
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) {
    const std::int64_t* from = all.data<std::int64_t>() + r * widest;
    out[static_cast<std::size_t>(r)].assign(from, from + sizes[static_cast<std::size_t>(r)]);
  }
  return out;
}

std::vector<std::string> CommunicatorWorkers::all_gather_bytes(const std::string& mine) {
  const std::vector<std::int64_t> sizes = gather_sizes(static_cast<std::int64_t>(mine.size()));
  const std::int64_t widest = std::max<std::int64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  Tensor padded = Tensor::zeros({widest}, DType::i8);
  std::memcpy(padded.raw_data(), mine.data(), mine.size());
  Tensor all = Tensor::empty({widest * size()}, DType::i8);
  group_.all_gather(padded, all);
  std::vector<std::string> out(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) {
    out[static_cast<std::size_t>(r)].assign(static_cast<const char*>(all.raw_data()) + r * widest,
                                            static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
  }
  return out;
}

std::vector<std::string> CommunicatorWorkers::all_to_all_bytes(const std::vector<std::string>& to) {
  MYRIAD_CHECK(static_cast<int>(to.size()) == size(),
               "all_to_all_bytes: " << to.size() << " messages for " << size() << " workers");
  Tensor send_counts = Tensor::empty({size()}, DType::i64), recv_counts = Tensor::empty({size()}, DType::i64);
  std::vector<std::int64_t> sends, recvs;
  std::int64_t send_total = 0;
  for (int r = 0; r < size(); ++r) {
    sends.push_back(static_cast<std::int64_t>(to[static_cast<std::size_t>(r)].size()));
    send_counts.data<std::int64_t>()[r] = sends.back();
    send_total += sends.back();
  }
  group_.all_to_all(send_counts, recv_counts);
  std::int64_t recv_total = 0;
  for (int r = 0; r < size(); ++r) {
    recvs.push_back(recv_counts.data<std::int64_t>()[r]);
    recv_total += recvs.back();
  }
  Tensor send = Tensor::empty({send_total}, DType::i8);
  Tensor recv = Tensor::empty({recv_total}, DType::i8);
  char* at = static_cast<char*>(send.raw_data());
  // Packed back to back, no terminators: `sends` carries each message's length.
  for (const std::string& message : to) at = std::copy(message.begin(), message.end(), at);
  group_.all_to_all_v(send, sends, recv, recvs);
  std::vector<std::string> out;
  const char* from = static_cast<const char*>(recv.raw_data());
  for (std::int64_t count : recvs) {
    out.emplace_back(from, static_cast<std::size_t>(count));
    from += count;
  }
  return out;
}

}  // namespace myriad::train
