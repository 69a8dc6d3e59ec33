// collect_moe_metrics: the model's per-layer routing counts summed over dp x cp, tp and pp in one i64
// all-reduce each, the loss sums in one float64 rank-order reduction each (layers a rank does not
// hold contribute zeros). The layers' totals are read from where the model computes in one transfer.
#include "myriad/train/metrics/moe_metrics.h"

#include <algorithm>

#include "myriad/distributed/scalar_reduce.h"

namespace myriad::train {

std::vector<MoeLayerMetrics> collect_moe_metrics(const nn::GptModel& model, distributed::Communicator& data,
                                                 distributed::Communicator& tp, distributed::Communicator& pp) {
  const nn::TransformerConfig& c = model.config();
  if (!c.moe.enabled()) return {};
  std::vector<int> layers;
  for (int l = 0; l < c.n_layer; ++l) {
    if (c.moe.is_moe_layer(l)) layers.push_back(l);
  }
  // Per layer: routed per expert, assignments, dropped, sequences, tokens (i64); the aux and z
  // loss sums (float64, summed in rank order). One reduction of each kind per group, whatever the
  // number of layers.
  const std::int64_t E = c.moe.num_experts, per_layer = E + 4;
  Tensor counts = Tensor::zeros({static_cast<std::int64_t>(layers.size()) * per_layer}, DType::i64);
  std::vector<double> losses(2 * layers.size(), 0.0);  // aux, z per layer
  const Tensor totals = model.moe_totals_on_host();    // every local layer's, one read
  for (std::size_t local = 0; local < model.moe_stats().size(); ++local) {
    const nn::MoeLayerStats& s = model.moe_stats()[local];
    const auto i = static_cast<std::size_t>(std::find(layers.begin(), layers.end(), s.layer) - layers.begin());
    std::int64_t* row = counts.data<std::int64_t>() + static_cast<std::int64_t>(i) * per_layer;
    if (totals.defined()) {
      const double* t = totals.data<double>() + static_cast<std::int64_t>(local) * (E + 3);
      for (std::int64_t e = 0; e < E; ++e) row[e] = static_cast<std::int64_t>(t[e]);
      row[E + 1] = static_cast<std::int64_t>(t[E]);
      losses[2 * i] = t[E + 1];
      losses[2 * i + 1] = t[E + 2];
    }
    row[E] = s.assignments;
    row[E + 2] = s.sequences;
    row[E + 3] = s.tokens;
  }
  for (distributed::Communicator* group : {&data, &tp, &pp}) {
    group->all_reduce(counts);
    losses = distributed::sum_over_ranks(*group, losses);
  }
  std::vector<MoeLayerMetrics> out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::int64_t* row = counts.data<std::int64_t>() + static_cast<std::int64_t>(i) * per_layer;
    MoeLayerMetrics m;
    m.layer = layers[i];
    m.tokens_per_expert_min = static_cast<double>(*std::min_element(row, row + E));
    m.tokens_per_expert_max = static_cast<double>(*std::max_element(row, row + E));
    m.tokens_per_expert_mean = static_cast<double>(row[E]) / static_cast<double>(E);
    m.dropped_share = row[E] > 0 ? static_cast<double>(row[E + 1]) / static_cast<double>(row[E]) : 0.0;
    const auto sequences = static_cast<double>(row[E + 2]), tokens = static_cast<double>(row[E + 3]);
    m.aux_loss = sequences > 0 ? losses[2 * i] / sequences : 0.0;
    m.z_loss = tokens > 0 ? losses[2 * i + 1] / tokens : 0.0;
    out.push_back(m);
  }
  return out;
}

}  // namespace myriad::train
