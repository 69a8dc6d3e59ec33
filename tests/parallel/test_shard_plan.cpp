// The shard plan (nn/shard_plan.h) applied by the model's constructors: at every tp and ep degree
// and rank, the parts the ranks hold tile each parameter exactly once counting primaries only
// (once per ep rank for a non-expert parameter, once in all for an expert's), the column-parallel
// qkv rows are whole heads in q | k | v order, the local widths the layers size their buffers by
// equal the rows the plan gives, MoE parameters under tp are the only tp_partial ones; and the
// errors of a plan that cannot apply name the parameter and the degree.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "myriad/distributed/dry_run_communicator.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/shard_plan.h"
#include "myriad/nn/transformer_block.h"
#include "myriad/ops/meta_backend.h"
#include "myriad/parallel/expert_parallel_group.h"
#include "myriad/parallel/tensor_parallel_regions.h"
#include "../support/test_helpers.h"

namespace myriad::parallel {
namespace {

// A LLaMA-style model with grouped-query attention, biases, and MoE blocks every second layer.
nn::TransformerConfig moe_llama() {
  nn::TransformerConfig c = nn::TransformerConfig::llama(61, 4, 8, 4, 32, 16);
  c.ffn_hidden = 64;
  c.bias = true;
  c.moe.num_experts = 4;
  c.moe.every = 2;
  c.moe.shared_experts = 1;
  c.moe.expert_ffn = 16;
  return c;
}

// One rank's model, built at its (tp, ep) coordinate through the same regions a run uses, on the
// meta device (shapes only).
struct RankModel {
  distributed::DryRunCommunicator tp_comm, ep_comm;
  std::unique_ptr<TensorParallelRegions> tp;
  std::unique_ptr<ExpertParallelGroup> ep;
  ops::MetaBackend meta;
  std::unique_ptr<nn::GptModel> model;
  RankModel(const nn::TransformerConfig& c, int tp_size, int tp_rank, int ep_size, int ep_rank, bool sequence_parallel)
      : tp_comm("tp", tp_rank, tp_size), ep_comm("ep", ep_rank, ep_size) {
    nn::ModelSplit split;
    if (tp_size > 1) {
      tp = std::make_unique<TensorParallelRegions>(tp_comm, sequence_parallel, c);
      split.tp = tp.get();
    }
    if (ep_size > 1) {
      ep = std::make_unique<ExpertParallelGroup>(ep_comm);
      split.ep = ep.get();
    }
    model = std::make_unique<nn::GptModel>(c, split, true, ops::Placement{&meta});
  }
};

TEST(ShardPlan, GlobStarsMatchAnyRunOfCharactersDotsIncluded) {
  EXPECT_TRUE(nn::glob_matches("blocks.*.attn.qkv.*", "blocks.12.attn.qkv.weight"));
  EXPECT_TRUE(nn::glob_matches("blocks.*.norm*", "blocks.0.norm2.bias"));
  EXPECT_TRUE(nn::glob_matches("wte", "wte"));
  EXPECT_TRUE(nn::glob_matches("*", ""));
  EXPECT_FALSE(nn::glob_matches("wte", "wte2"));
  EXPECT_FALSE(nn::glob_matches("blocks.*.mlp.fc.*", "blocks.1.mlp.proj.weight"));
  EXPECT_FALSE(nn::glob_matches("blocks.*.moe.experts.*", "blocks.1.moe.router.weight"));
}

TEST(ShardPlan, EveryRankHoldsItsPartAndEachElementCountsOnce) {
  const nn::TransformerConfig c = moe_llama();
  for (int tp : {1, 2, 4}) {
    for (int ep : {1, 2}) {
      for (bool sp : {false, true}) {
        SCOPED_TRACE("tp " + std::to_string(tp) + " ep " + std::to_string(ep) + (sp ? " sequence parallel" : ""));
        std::map<std::string, std::vector<int>> counted;  // per parameter: primaries holding each element
        std::map<std::string, bool> is_expert;
        for (int e = 0; e < ep; ++e) {
          for (int t = 0; t < tp; ++t) {
            RankModel rank(c, tp, t, ep, e, sp);
            const nn::ParameterStore& store = rank.model->parameters();
            for (const nn::Parameter& p : store.all()) {
              std::vector<int>& seen = counted[p.name];
              seen.resize(static_cast<std::size_t>(shape_numel(p.global_shape)));
              is_expert[p.name] = p.expert;
              const bool moe = p.name.find(".moe.") != std::string::npos;
              // Under sequence parallelism the norms' gradients come from each rank's rows: summed
              // over tp once per step like the MoE layer's.
              const bool norm = p.name.find("norm") != std::string::npos;
              EXPECT_EQ(p.tp_partial, (moe || (norm && sp)) && tp > 1) << p.name;
              if (!p.primary) continue;
              nn::for_each_held_box(p, p.value, [&](const std::vector<nn::IndexRange>& box, const Tensor&) {
                const std::vector<std::int64_t> strides = contiguous_strides(p.global_shape);
                std::vector<std::int64_t> index(box.size());
                for (std::size_t d = 0; d < box.size(); ++d) index[d] = box[d].begin;
                // Every element of the box (odometer over its ranges).
                while (true) {
                  std::int64_t flat = 0;
                  for (std::size_t d = 0; d < box.size(); ++d) flat += index[d] * strides[d];
                  ++seen[static_cast<std::size_t>(flat)];
                  std::size_t d = box.size();
                  while (d > 0 && ++index[d - 1] == box[d - 1].end) {
                    index[d - 1] = box[d - 1].begin;
                    --d;
                  }
                  if (d == 0) break;
                }
              });
            }
            // The widths the layers size their buffers by are the plan's rows.
            const nn::LocalWidths w = nn::local_widths(c, rank.model->split());
            EXPECT_EQ(w.heads * tp, c.n_head);
            EXPECT_EQ(w.kv_heads * tp, c.n_kv_head);
            EXPECT_EQ(w.ffn * tp, c.ffn_hidden);
            const nn::Parameter& qkv = store.find("blocks.0.attn.qkv.weight");
            EXPECT_EQ(qkv.shape[0], w.qkv());
            if (tp == 1) continue;  // held whole
            ASSERT_EQ(qkv.shard_ranges.size(), 3u);
            const std::int64_t D = c.head_dim(), Hq = c.n_head, Hkv = c.n_kv_head;
            EXPECT_EQ(qkv.shard_ranges[0].begin, t * w.heads * D);  // this rank's q heads
            EXPECT_EQ(qkv.shard_ranges[1].begin, (Hq + t * w.kv_heads) * D);
            EXPECT_EQ(qkv.shard_ranges[2].begin, (Hq + Hkv + t * w.kv_heads) * D);
          }
        }
        ASSERT_FALSE(counted.empty());
        for (const auto& [name, seen] : counted) {
          const int want = is_expert[name] ? 1 : ep;
          for (std::size_t i = 0; i < seen.size(); ++i) {
            if (seen[i] != want) {
              ADD_FAILURE() << name << " element " << i << " is held as a primary " << seen[i] << " times, not "
                            << want;
              break;
            }
          }
        }
      }
    }
  }
}

TEST(ShardPlan, ADegreeThatCutsAHeadNamesTheParameterAndTheDegree) {
  nn::TransformerConfig c = nn::TransformerConfig::gpt2(13, 1, 2, 8, 8);
  testing::expect_error_naming([&] { RankModel rank(c, 4, 1, 1, 0, false); },
                               {"blocks.0.attn.qkv.weight", "tp 4", "granules of 4"});
  nn::TransformerConfig moe = moe_llama();
  moe.moe.num_experts = 3;
  testing::expect_error_naming([&] { RankModel rank(moe, 1, 0, 2, 1, false); }, {"blocks.1.moe.experts", "ep 2"});
}

TEST(ShardPlan, AParameterNoPatternMatchesIsNamed) {
  const nn::ShardPlan plan({{"wte", nn::ShardRule::vocabulary_parallel}});
  testing::expect_error_naming([&] { plan.rule_for("blocks.0.attn.qkv.weight"); },
                               {"blocks.0.attn.qkv.weight", "no pattern"});
  EXPECT_EQ(nn::transformer_shard_plan().rule_for("blocks.3.moe.experts.up.weight"), nn::ShardRule::expert_local);
  EXPECT_EQ(nn::transformer_shard_plan().rule_for("blocks.3.moe.shared.up.weight"), nn::ShardRule::tp_token_share);
  EXPECT_EQ(nn::transformer_shard_plan().rule_for("blocks.3.mlp.up.weight"), nn::ShardRule::column_parallel);
}

}  // namespace
}  // namespace myriad::parallel
