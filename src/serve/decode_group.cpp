// DecodeGroup: the leader's announcements and the followers' loop (serve/decode_group.h).
#include "myriad/serve/decode_group.h"

#include <iostream>

#include "myriad/core/error.h"

namespace myriad::serve {

void DecodeGroup::send(const std::vector<std::int32_t>& payload) {
  MYRIAD_CHECK(leader(), "serve: only rank 0 of the serving group announces steps");
  Tensor header = Tensor::empty({1}, DType::i64);
  header.data<std::int64_t>()[0] = static_cast<std::int64_t>(payload.size());
  control_.broadcast_async(header, 0)->wait();
  if (payload.empty()) return;
  Tensor body = Tensor::empty({static_cast<std::int64_t>(payload.size())}, DType::i32);
  std::copy(payload.begin(), payload.end(), body.data<std::int32_t>());
  control_.broadcast_async(body, 0)->wait();
}

bool DecodeGroup::receive(std::vector<std::int32_t>& payload) {
  Tensor header = Tensor::empty({1}, DType::i64);
  control_.broadcast_async(header, 0)->wait();
  const std::int64_t count = header.data<std::int64_t>()[0];
  if (count == 0) return false;
  Tensor body = Tensor::empty({count}, DType::i32);
  control_.broadcast_async(body, 0)->wait();
  payload.assign(body.data<std::int32_t>(), body.data<std::int32_t>() + count);
  return true;
}

void DecodeGroup::announce_cache(std::int64_t block_size, std::int64_t num_blocks) {
  send({static_cast<std::int32_t>(block_size), static_cast<std::int32_t>(num_blocks)});
}

void DecodeGroup::announce(const std::vector<nn::DecodeSequence>& step) {
  std::vector<std::int32_t> payload = {static_cast<std::int32_t>(step.size())};
  for (const nn::DecodeSequence& seq : step) {
    payload.push_back(static_cast<std::int32_t>(seq.tokens.size()));
    payload.push_back(static_cast<std::int32_t>(seq.start));
    payload.push_back(static_cast<std::int32_t>(seq.blocks->size()));
    payload.insert(payload.end(), seq.tokens.begin(), seq.tokens.end());
    payload.insert(payload.end(), seq.blocks->begin(), seq.blocks->end());
  }
  send(payload);
}

void DecodeGroup::announce_stop() { send({}); }

std::int64_t DecodeGroup::follow(const nn::GptModel& model) {
  MYRIAD_CHECK(!leader(), "serve: rank 0 leads the serving group; it does not follow");
  std::vector<std::int32_t> payload;
  if (!receive(payload)) return 0;
  MYRIAD_CHECK(payload.size() == 2, "serve: the first message of the serving group is not the cache's shape");
  nn::PagedKvCache cache = model.make_paged_kv_cache(payload[0], payload[1]);
  std::int64_t steps = 0;
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<nn::DecodeSequence> step;
  while (receive(payload)) {
    const auto sequences = static_cast<std::size_t>(payload[0]);
    tables.assign(sequences, {});
    step.assign(sequences, {});
    std::size_t at = 1;
    for (std::size_t s = 0; s < sequences; ++s) {
      MYRIAD_CHECK(at + 3 <= payload.size(), "serve: a step message of the serving group is cut short");
      const auto n = static_cast<std::size_t>(payload[at]), blocks = static_cast<std::size_t>(payload[at + 2]);
      step[s].start = payload[at + 1];
      at += 3;
      MYRIAD_CHECK(at + n + blocks <= payload.size(), "serve: a step message of the serving group is cut short");
      step[s].tokens.assign(payload.begin() + static_cast<std::ptrdiff_t>(at),
                            payload.begin() + static_cast<std::ptrdiff_t>(at + n));
      tables[s].assign(payload.begin() + static_cast<std::ptrdiff_t>(at + n),
                       payload.begin() + static_cast<std::ptrdiff_t>(at + n + blocks));
      step[s].blocks = &tables[s];
      at += n + blocks;
    }
    try {
      model.decode(step, cache);  // the leader samples; the logits here are discarded
    } catch (const Error& e) {    // the leader's decode threw the same check: its requests fail, the group goes on
      std::cerr << "myriad-serve: rank " << control_.rank() << ": step " << steps << ": " << e.message() << std::endl;
    }
    ++steps;
  }
  return steps;
}

}  // namespace myriad::serve
