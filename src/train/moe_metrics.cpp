// collect_moe_metrics: the model's per-layer routing counts, summed over dp, tp and pp in one i64
// all-reduce each (layers a rank does not hold contribute zeros), the loss sums in float64.
#include "myriad/train/moe_metrics.h"

#include <algorithm>

#include "myriad/distributed/scalar_reduce.h"

namespace myriad::train {

std::vector<MoeLayerMetrics> collect_moe_metrics(const nn::GptModel& model, dist::Communicator& dp,
                                                 dist::Communicator& tp, dist::Communicator& pp) {
  const nn::TransformerConfig& c = model.config();
  if (!c.moe.enabled()) return {};
  std::vector<int> layers;
  for (int l = 0; l < c.n_layer; ++l) {
    if (c.moe.is_moe_layer(l)) layers.push_back(l);
  }
  const std::int64_t E = c.moe.num_experts, per_layer = E + 2;  // routed per expert, assignments, dropped
  Tensor counts = Tensor::zeros({static_cast<std::int64_t>(layers.size()) * per_layer}, DType::i64);
  std::vector<double> aux(layers.size(), 0.0), z(layers.size(), 0.0), sequences(layers.size(), 0.0),
      tokens(layers.size(), 0.0);
  for (const nn::MoeLayerStats& s : model.moe_stats()) {
    const auto i = static_cast<std::size_t>(std::find(layers.begin(), layers.end(), s.layer) - layers.begin());
    std::int64_t* row = counts.data<std::int64_t>() + static_cast<std::int64_t>(i) * per_layer;
    for (std::int64_t e = 0; e < E && e < static_cast<std::int64_t>(s.routed.size()); ++e) row[e] = s.routed[e];
    row[E] = s.assignments;
    row[E + 1] = s.dropped;
    aux[i] = s.aux_loss_sum;
    z[i] = s.z_loss_sum;
    sequences[i] = static_cast<double>(s.sequences);
    tokens[i] = static_cast<double>(s.tokens);
  }
  dp.all_reduce(counts);
  tp.all_reduce(counts);
  pp.all_reduce(counts);
  std::vector<MoeLayerMetrics> out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto reduce = [&](double v) {
      return dist::sum_over_ranks(pp, dist::sum_over_ranks(tp, dist::sum_over_ranks(dp, v)));
    };
    const std::int64_t* row = counts.data<std::int64_t>() + static_cast<std::int64_t>(i) * per_layer;
    MoeLayerMetrics m;
    m.layer = layers[i];
    m.tokens_per_expert_min = static_cast<double>(*std::min_element(row, row + E));
    m.tokens_per_expert_max = static_cast<double>(*std::max_element(row, row + E));
    m.tokens_per_expert_mean = static_cast<double>(row[E]) / static_cast<double>(E);
    m.dropped_share = row[E] > 0 ? static_cast<double>(row[E + 1]) / static_cast<double>(row[E]) : 0.0;
    const double seqs = reduce(sequences[i]), toks = reduce(tokens[i]);
    m.aux_loss = seqs > 0 ? reduce(aux[i]) / seqs : 0.0;
    m.z_loss = toks > 0 ? reduce(z[i]) / toks : 0.0;
    out.push_back(m);
  }
  return out;
}

}  // namespace myriad::train
