// DataParallel: the ZeRO stage's ParameterUnits and the run's GradientExchange, made once, and
// the rule that joins them (see data_parallel.h).
#include "myriad/parallel/data_parallel.h"

namespace myriad::parallel {

DataParallel::DataParallel(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                           const optim::AdamWConfig& adam)
    : units_(make_parameter_units(model, dp, options, adam)),
      exchange_(make_gradient_exchange(options.exchange, *units_)) {}

DataParallel::~DataParallel() = default;

void DataParallel::begin_micro_batch(bool last_of_step) {
  units_->begin_micro_batch((units_->reduces_every_micro_batch() || last_of_step) && exchange_->reduces_in_buckets());
}

void DataParallel::begin_pipelined_backward(bool final_for_chunk) {
  units_->begin_pipelined_backward(final_for_chunk && exchange_->reduces_in_buckets());
}

void DataParallel::finish_step() {
  if (!units_->pipelined()) {
    units_->finish_backward();
  } else if (exchange_->reduces_in_buckets()) {
    units_->reduce_gradients();
  }
  exchange_->finish_step();
  units_->sum_tp_partial_grads();
}

void DataParallel::snapshot_owned(OwnedState& out) {
  units_->snapshot_owned(out);
  exchange_->snapshot_owned(out);
}

void DataParallel::load_full(const Tensor& values, const Tensor& m, const Tensor& v) {
  units_->load_full(values, m, v);
  exchange_->after_load();
}

}  // namespace myriad::parallel
