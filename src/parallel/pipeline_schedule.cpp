// Pipeline schedules as action lists and their model-free simulation (see pipeline_schedule.h).
//
// build_schedule first orders each rank's computations (forward / backward of a micro-batch and
// chunk), then wraps each one in the receives before and the sends after it. simulate_schedule is a
// dataflow execution: ranks run their lists in order, a recv is ready once the peer has issued the
// matching send, and times are max(own clock, send time), so the result does not depend on the
// order in which the simulator visits the ranks.
#include "myriad/parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <sstream>

#include "myriad/core/error.h"

namespace myriad::parallel {

const char* action_name(PipelineAction::Type type) {
  switch (type) {
    case PipelineAction::forward:
      return "forward";
    case PipelineAction::backward:
      return "backward";
    case PipelineAction::send_activation:
      return "send_activation";
    case PipelineAction::recv_activation:
      return "recv_activation";
    case PipelineAction::send_gradient:
      return "send_gradient";
    case PipelineAction::recv_gradient:
      return "recv_gradient";
  }
  return "?";
}

std::string describe(const PipelineAction& action) {
  std::ostringstream out;
  out << action_name(action.type) << "(micro-batch " << action.micro_batch << ", chunk " << action.chunk << ")";
  switch (action.type) {
    case PipelineAction::send_activation:
    case PipelineAction::send_gradient:
      out << " to rank " << action.peer;
      break;
    case PipelineAction::recv_activation:
    case PipelineAction::recv_gradient:
      out << " from rank " << action.peer;
      break;
    default:
      break;
  }
  return out.str();
}

namespace {

void check_sizes(const char* what, int p, int m, int v) {
  MYRIAD_CHECK(p >= 1 && m >= 1 && v >= 1, what << ": pipeline stages (" << p << "), micro-batches (" << m
                                                << ") and virtual stages (" << v << ") must all be >= 1");
}

struct Compute {
  bool forward;
  int micro_batch;
  int chunk;
};

// The order of computations on rank r.
std::vector<Compute> compute_order(PipelineSchedule kind, int p, int m, int v, int r) {
  std::vector<Compute> order;
  if (kind == PipelineSchedule::gpipe) {
    for (int i = 0; i < m; ++i) order.push_back({true, i, 0});
    for (int i = 0; i < m; ++i) order.push_back({false, i, 0});
    return order;
  }
  // 1F1B and interleaved 1F1B: the k-th forward / backward of this rank, then warm-up, steady, cool-down.
  const int total = m * v;
  auto nth = [&](int k, bool forward) -> Compute {
    if (kind == PipelineSchedule::one_f_one_b) return {forward, k, 0};
    const int chunk = (k / p) % v;
    return {forward, (k / (p * v)) * p + k % p, forward ? chunk : v - 1 - chunk};
  };
  const int warmup = kind == PipelineSchedule::one_f_one_b ? std::min(p - r - 1, total)
                                                           : std::min(2 * (p - r - 1) + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) order.push_back(nth(k, true));
  for (int i = 0; i < total - warmup; ++i) {
    order.push_back(nth(warmup + i, true));
    order.push_back(nth(i, false));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(nth(k, false));
  return order;
}

}  // namespace

std::vector<std::vector<PipelineAction>> build_schedule(PipelineSchedule kind, int stages, int micro_batches,
                                                        int virtual_stages) {
  const int p = stages, m = micro_batches, v = virtual_stages;
  check_sizes("build_schedule", p, m, v);
  MYRIAD_CHECK(v == 1 || kind == PipelineSchedule::interleaved,
               "build_schedule: " << v << " virtual stages need the interleaved schedule, got " << choice_name(kind));
  if (kind == PipelineSchedule::interleaved) {
    MYRIAD_CHECK(p >= 2, "build_schedule: the interleaved schedule needs >= 2 pipeline stages, got " << p);
    MYRIAD_CHECK(m % p == 0, "build_schedule: the interleaved schedule needs micro-batches ("
                                 << m << ") divisible by pipeline stages (" << p << ")");
  }
  const int last = p * v - 1;  // last global stage
  std::vector<std::vector<PipelineAction>> schedule(p);
  for (int r = 0; r < p; ++r) {
    for (const Compute& c : compute_order(kind, p, m, v, r)) {
      const int g = c.chunk * p + r;
      if (c.forward) {
        if (g > 0) schedule[r].push_back({PipelineAction::recv_activation, c.micro_batch, c.chunk, (g - 1) % p});
        schedule[r].push_back({PipelineAction::forward, c.micro_batch, c.chunk, -1});
        if (g < last) schedule[r].push_back({PipelineAction::send_activation, c.micro_batch, c.chunk, (g + 1) % p});
      } else {
        if (g < last) schedule[r].push_back({PipelineAction::recv_gradient, c.micro_batch, c.chunk, (g + 1) % p});
        schedule[r].push_back({PipelineAction::backward, c.micro_batch, c.chunk, -1});
        if (g > 0) schedule[r].push_back({PipelineAction::send_gradient, c.micro_batch, c.chunk, (g - 1) % p});
      }
    }
  }
  return schedule;
}

double bubble_formula(PipelineSchedule kind, int stages, int micro_batches, int virtual_stages) {
  check_sizes("bubble_formula", stages, micro_batches, virtual_stages);
  const int v = kind == PipelineSchedule::interleaved ? virtual_stages : 1;
  return static_cast<double>(stages - 1) / (static_cast<double>(v) * micro_batches + stages - 1);
}

namespace {

// One message: (0 activation / 1 gradient, micro-batch, global stage of the sender).
using MessageKey = std::array<int, 3>;

struct Sent {
  double time;
  int rank;
  int chunk;
  int action;
  PipelineAction::Type type;
  int peer;
  bool received = false;
};

struct RankState {
  std::size_t pc = 0;
  double clock = 0.0;
  double busy = 0.0;
  int in_flight = 0;
  int peak = 0;
  std::vector<char> forward_done, backward_done, activation_in, gradient_in;  // [micro-batch * v + chunk]
};

class Simulator {
 public:
  Simulator(const std::vector<std::vector<PipelineAction>>& schedule, int p, int m, int v, double backward_cost)
      : schedule_(schedule), p_(p), m_(m), v_(v), backward_cost_(backward_cost), ranks_(p) {
    for (RankState& s : ranks_) {
      s.forward_done.assign(static_cast<std::size_t>(m) * v, 0);
      s.backward_done = s.activation_in = s.gradient_in = s.forward_done;
    }
  }

  ScheduleCheck run() {
    ScheduleCheck check;
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < p_; ++r) {
        while (ranks_[r].pc < schedule_[r].size()) {
          const Step step = execute(r);
          if (step == Step::failed) return failed(check);
          if (step == Step::blocked) break;
          progress = true;
        }
      }
    }
    if (stuck(problem_) || unfinished(problem_)) return failed(check);
    check.ok = true;
    for (const RankState& s : ranks_) check.makespan = std::max(check.makespan, s.clock);
    double idle = 0.0;
    for (const RankState& s : ranks_) {
      idle += check.makespan - s.busy;
      check.peak_in_flight.push_back(s.peak);
    }
    check.idle_fraction = check.makespan > 0.0 ? idle / (p_ * check.makespan) : 0.0;
    check.steps = static_cast<int>(std::ceil(check.makespan - 1e-9));
    check.fifo_per_peer = sent_order_ == received_order_;
    return check;
  }

 private:
  enum class Step { done, blocked, failed };

  ScheduleCheck& failed(ScheduleCheck& check) {
    check.ok = false;
    check.problem = problem_;
    return check;
  }

  // Sets the problem: "rank R, action I (forward(micro-batch M, chunk C)): <what>".
  Step fail(int r, const std::string& what) {
    std::ostringstream out;
    out << "rank " << r << ", action " << ranks_[r].pc << " (" << describe(schedule_[r][ranks_[r].pc]) << "): " << what;
    problem_ = out.str();
    return Step::failed;
  }

  Step execute(int r) {
    RankState& s = ranks_[r];
    const PipelineAction& a = schedule_[r][s.pc];
    if (a.micro_batch < 0 || a.micro_batch >= m_) {
      return fail(r, "micro-batch outside [0, " + std::to_string(m_) + ")");
    }
    if (a.chunk < 0 || a.chunk >= v_) return fail(r, "chunk outside [0, " + std::to_string(v_) + ")");
    const int g = a.chunk * p_ + r, last = p_ * v_ - 1;
    const std::size_t slot = static_cast<std::size_t>(a.micro_batch) * v_ + a.chunk;
    const bool is_compute = a.type == PipelineAction::forward || a.type == PipelineAction::backward;
    if (is_compute && a.peer != -1) return fail(r, "a computation has peer " + std::to_string(a.peer) + ", not -1");
    switch (a.type) {
      case PipelineAction::forward:
        if (s.forward_done[slot]) return fail(r, "second forward of this micro-batch and chunk");
        if (g > 0 && !s.activation_in[slot]) return fail(r, "forward before its recv_activation");
        s.forward_done[slot] = 1;
        s.peak = std::max(s.peak, ++s.in_flight);
        s.clock += 1.0;
        s.busy += 1.0;
        break;
      case PipelineAction::backward:
        if (!s.forward_done[slot]) return fail(r, "backward before its forward");
        if (s.backward_done[slot]) return fail(r, "second backward of this micro-batch and chunk");
        if (g < last && !s.gradient_in[slot]) return fail(r, "backward before its recv_gradient");
        s.backward_done[slot] = 1;
        --s.in_flight;
        s.clock += backward_cost_;
        s.busy += backward_cost_;
        break;
      case PipelineAction::send_activation:
        if (g == last) return fail(r, "the last global stage has no next stage to send to");
        if (!s.forward_done[slot]) return fail(r, "send_activation before its forward");
        return send(r, a, {0, a.micro_batch, g}, (g + 1) % p_);
      case PipelineAction::send_gradient:
        if (g == 0) return fail(r, "global stage 0 has no previous stage to send to");
        if (!s.backward_done[slot]) return fail(r, "send_gradient before its backward");
        return send(r, a, {1, a.micro_batch, g}, (g - 1) % p_);
      case PipelineAction::recv_activation:
        if (g == 0) return fail(r, "global stage 0 has no previous stage to receive from");
        return receive(r, a, {0, a.micro_batch, g - 1}, (g - 1) % p_, s.activation_in[slot]);
      case PipelineAction::recv_gradient:
        if (g == last) return fail(r, "the last global stage has no next stage to receive from");
        return receive(r, a, {1, a.micro_batch, g + 1}, (g + 1) % p_, s.gradient_in[slot]);
      default:
        return fail(r, "unknown action type " + std::to_string(static_cast<int>(a.type)));
    }
    ++s.pc;
    return Step::done;
  }

  Step send(int r, const PipelineAction& a, const MessageKey& key, int expected_peer) {
    if (a.peer != expected_peer) return fail(r, "peer should be rank " + std::to_string(expected_peer));
    if (sent_.count(key)) return fail(r, "sent a second time");
    RankState& s = ranks_[r];
    sent_.emplace(key, Sent{s.clock, r, a.chunk, static_cast<int>(s.pc), a.type, a.peer});
    sent_order_[{r, a.peer}].push_back(key);
    ++s.pc;
    return Step::done;
  }

  Step receive(int r, const PipelineAction& a, const MessageKey& key, int expected_peer, char& arrived) {
    if (a.peer != expected_peer) return fail(r, "peer should be rank " + std::to_string(expected_peer));
    auto it = sent_.find(key);
    if (it == sent_.end()) return Step::blocked;
    if (it->second.received || arrived) return fail(r, "received a second time");
    it->second.received = true;
    arrived = 1;
    RankState& s = ranks_[r];
    s.clock = std::max(s.clock, it->second.time);
    received_order_[{a.peer, r}].push_back(key);
    ++s.pc;
    return Step::done;
  }

  // The send that recv `a` on rank r waits for, as the peer's list would hold it.
  PipelineAction matching_send(int r, const PipelineAction& a) const {
    const int g = a.chunk * p_ + r;
    const int from = a.type == PipelineAction::recv_activation ? g - 1 : g + 1;
    const auto type =
        a.type == PipelineAction::recv_activation ? PipelineAction::send_activation : PipelineAction::send_gradient;
    return {type, a.micro_batch, from / p_, r};
  }

  // No rank can move: every unfinished rank waits in a recv. Lists what each waits for; a recv
  // whose send is nowhere in the rest of the peer's list is the cause, else the ranks wait in a cycle.
  bool stuck(std::string& problem) const {
    std::ostringstream out;
    bool any = false, orphan = false;
    for (int r = 0; r < p_; ++r) {
      const RankState& s = ranks_[r];
      if (s.pc == schedule_[r].size()) continue;
      const PipelineAction& a = schedule_[r][s.pc];
      const std::vector<PipelineAction>& peer_list = schedule_[a.peer];
      const bool will_send = std::find(peer_list.begin() + static_cast<std::ptrdiff_t>(ranks_[a.peer].pc),
                                       peer_list.end(), matching_send(r, a)) != peer_list.end();
      out << (any ? "; " : "") << "rank " << r << " waits at action " << s.pc << " in " << describe(a);
      if (!will_send) {
        out << ", which rank " << a.peer
            << (ranks_[a.peer].pc == peer_list.size() ? " finished its list without sending"
                                                      : " does not send in the rest of its list");
      }
      orphan = orphan || !will_send;
      any = true;
    }
    if (any) problem = (orphan ? "receive with no matching send: " : "deadlock, no rank can progress: ") + out.str();
    return any;
  }

  // Every rank ran all its computations and every send was received.
  bool unfinished(std::string& problem) const {
    std::ostringstream out;
    for (int r = 0; r < p_; ++r) {
      for (int mb = 0; mb < m_; ++mb) {
        for (int c = 0; c < v_; ++c) {
          const std::size_t slot = static_cast<std::size_t>(mb) * v_ + c;
          const char* missing = !ranks_[r].forward_done[slot]    ? "forward"
                                : !ranks_[r].backward_done[slot] ? "backward"
                                                                 : nullptr;
          if (missing) {
            out << "rank " << r << " never runs the " << missing << " of micro-batch " << mb << ", chunk " << c;
            problem = out.str();
            return true;
          }
        }
      }
    }
    for (const auto& [key, sent] : sent_) {
      if (sent.received) continue;
      const PipelineAction a{sent.type, key[1], sent.chunk, sent.peer};
      out << "rank " << sent.rank << ", action " << sent.action << " (" << describe(a) << "): rank " << sent.peer
          << " never receives it";
      problem = out.str();
      return true;
    }
    return false;
  }

  const std::vector<std::vector<PipelineAction>>& schedule_;
  const int p_, m_, v_;
  const double backward_cost_;
  std::vector<RankState> ranks_;
  std::map<MessageKey, Sent> sent_;
  std::map<std::array<int, 2>, std::vector<MessageKey>> sent_order_, received_order_;  // by (from, to)
  std::string problem_;
};

}  // namespace

ScheduleCheck simulate_schedule(const std::vector<std::vector<PipelineAction>>& schedule, int stages, int micro_batches,
                                int virtual_stages, double backward_cost) {
  check_sizes("simulate_schedule", stages, micro_batches, virtual_stages);
  MYRIAD_CHECK(static_cast<int>(schedule.size()) == stages,
               "simulate_schedule: the schedule has " << schedule.size() << " rank lists for " << stages << " stages");
  MYRIAD_CHECK(backward_cost > 0.0 && std::isfinite(backward_cost),
               "simulate_schedule: backward_cost must be > 0, got " << backward_cost);
  return Simulator(schedule, stages, micro_batches, virtual_stages, backward_cost).run();
}

}  // namespace myriad::parallel
