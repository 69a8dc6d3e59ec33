// collect_attention_metrics: the model's block-selection counts summed over dp, tp and pp in one
// i64 all-reduce each, the estimated mass in one float64 rank-order reduction each. A device
// selection's totals are read here, once per step (GptModel::attention_stats).
#include "myriad/train/metrics/attention_metrics.h"

#include "myriad/distributed/scalar_reduce.h"

namespace myriad::train {

AttentionMetrics collect_attention_metrics(const nn::GptModel& model, distributed::Communicator& dp,
                                           distributed::Communicator& tp, distributed::Communicator& pp) {
  AttentionMetrics out;
  if (!model.config().attention.block_sparse()) return out;
  const nn::BlockSelectionStats s = model.attention_stats();  // one device read at most
  Tensor counts = Tensor::zeros({4}, DType::i64);
  std::int64_t* c = counts.data<std::int64_t>();
  c[0] = s.query_blocks;
  c[1] = s.kept_blocks;
  c[2] = s.causal_blocks;
  c[3] = s.selecting_rows;
  std::vector<double> mass = {s.estimated_mass};
  for (distributed::Communicator* group : {&dp, &tp, &pp}) {
    group->all_reduce(counts);
    mass = distributed::sum_over_ranks(*group, mass);
  }
  out.block_sparse = true;
  out.kept_blocks_per_query_block = c[0] > 0 ? static_cast<double>(c[1]) / static_cast<double>(c[0]) : 0.0;
  out.density = c[2] > 0 ? static_cast<double>(c[1]) / static_cast<double>(c[2]) : 0.0;
  out.selects = model.config().attention.selects();
  out.estimated_mass = c[3] > 0 ? mass[0] / static_cast<double>(c[3]) : 0.0;
  return out;
}

}  // namespace myriad::train
