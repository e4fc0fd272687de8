#include "launch/gpu_binding.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>

#include "launch/parse.h"

namespace slurmddp::launch {

namespace {

bool starts_with_ci(const std::string& s, const char* prefix) {
  size_t n = std::char_traits<char>::length(prefix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

// Slurm reads these numbers with strtol(..., 0): "0x3" is hex, "010" octal.
std::optional<uint64_t> slurm_number(const std::string& text) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return static_cast<uint64_t>(v);
}

// "0,1*2,0x3": one set per entry, repeated.
std::optional<std::vector<uint64_t>> parse_sets(const std::string& list, bool is_map) {
  std::vector<uint64_t> sets;
  for (const auto& entry : split(list, ',')) {
    std::string value = entry;
    uint64_t repeat = 1;
    if (auto star = entry.find('*'); star != std::string::npos) {
      value = entry.substr(0, star);
      auto r = slurm_number(entry.substr(star + 1));
      if (!r || *r > 4096) return std::nullopt;
      repeat = *r == 0 ? 1 : *r;  // Slurm takes a count of 0 as 1
    }
    auto v = slurm_number(value);
    if (!v) return std::nullopt;
    uint64_t set = 0;
    if (is_map) {
      if (*v > 63) return std::nullopt;
      set = uint64_t{1} << *v;
    } else {
      if (*v == 0) return std::nullopt;
      set = *v;
    }
    sets.insert(sets.end(), repeat, set);
  }
  if (sets.empty()) return std::nullopt;
  return sets;
}

std::optional<uint32_t> small_count(const std::string& text) {
  auto v = slurm_number(text);
  if (!v || *v == 0 || *v > 1u << 16) return std::nullopt;
  return static_cast<uint32_t>(*v);
}

std::string bind_text(const GpuBind& b) {
  return "--gpu-bind=" + b.text;
}

}  // namespace

std::string GpuList::text() const {
  return variable.empty() ? "no GPU variable" : variable + "=" + join(ids, ',');
}

GpuList gpu_list(const std::string& variable, const std::optional<std::string>& value) {
  GpuList l;
  if (!value) return l;
  l.variable = variable;
  if (*value == "NoDevFiles") return l;
  for (auto& id : split(*value, ',')) {
    // The CUDA and HIP runtimes stop reading the list at an invalid entry:
    // "-1" (the usual way to hide every GPU) ends it.
    if (!id.empty() && id[0] == '-') break;
    if (!id.empty()) l.ids.push_back(id);
  }
  return l;
}

GpuList read_gpu_list(const std::function<std::optional<std::string>(const char*)>& env) {
  for (const char* name : kGpuListVariables) {
    if (auto v = env(name)) return gpu_list(name, v);
  }
  return {};
}

std::optional<GpuBind> parse_gpu_bind(const std::string& tres_bind) {
  for (const auto& part : split(tres_bind, '+')) {
    std::string rest;
    if (starts_with_ci(part, "gres/gpu:")) {
      rest = part.substr(9);
    } else if (starts_with_ci(part, "gpu:")) {  // Slurm 22.05
      rest = part.substr(4);
    } else {
      continue;
    }
    if (starts_with_ci(rest, "verbose,")) rest = rest.substr(8);
    GpuBind b;
    b.text = rest;
    auto after = [&](size_t n) { return rest.substr(n); };
    if (starts_with_ci(rest, "none")) {
      b.kind = GpuBind::Kind::kNone;
    } else if (starts_with_ci(rest, "closest")) {
      b.kind = GpuBind::Kind::kClosest;
    } else if (starts_with_ci(rest, "map_gpu:")) {
      b.kind = GpuBind::Kind::kMap;
      b.sets = parse_sets(after(8), true);
    } else if (starts_with_ci(rest, "map:")) {
      b.kind = GpuBind::Kind::kMap;
      b.sets = parse_sets(after(4), true);
    } else if (starts_with_ci(rest, "mask_gpu:")) {
      b.kind = GpuBind::Kind::kMask;
      b.sets = parse_sets(after(9), false);
    } else if (starts_with_ci(rest, "mask:")) {
      b.kind = GpuBind::Kind::kMask;
      b.sets = parse_sets(after(5), false);
    } else if (starts_with_ci(rest, "single:")) {
      b.kind = GpuBind::Kind::kSingle;
      b.count = small_count(after(7)).value_or(0);
    } else if (starts_with_ci(rest, "per_task:")) {
      b.kind = GpuBind::Kind::kPerTask;
      b.count = small_count(after(9)).value_or(0);
    } else {
      b.kind = GpuBind::Kind::kOther;
    }
    return b;
  }
  return std::nullopt;
}

DeviceChoice choose_device(const DeviceFacts& f, bool bind) {
  DeviceChoice d;
  const auto n = static_cast<uint32_t>(f.task.ids.size());
  if (n == 0) return d;
  const std::string list = f.task.text();
  std::optional<uint32_t> index;
  auto shared_list = [&](const std::string& how) {
    index = f.local_rank % n;
    d.oversubscribed = f.local_task_count > n;
    d.why = "local rank " + std::to_string(f.local_rank) + " modulo the " + std::to_string(n) +
            " GPUs that " + how + " (" + list + ")";
  };
  auto left_to_init = [&](const std::string& why) {
    d.why = why + "; init() gives each rank of the node a distinct GPU";
  };
  const bool sees_node = !f.node || f.node->ids.empty() || [&] {
    auto a = f.task.ids, b = f.node->ids;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    return a == b;
  }();
  if (!f.bind || f.bind->kind == GpuBind::Kind::kNone) {
    if (sees_node) {
      shared_list(f.bind ? "every task of the node sees with --gpu-bind=none"
                         : "every task of the node sees");
    } else if (n == 1) {
      index = 0;
      d.why = "the task's only GPU (" + list + ")";
    } else {
      left_to_init("this task sees " + list + " but the step has " + f.node->text() +
                   " on this node, with no GPU binding that says how the tasks share them");
    }
  } else {
    const GpuBind& b = *f.bind;
    // The sets of every local task under map/mask, when any two are equal or
    // disjoint: then a task's position among the tasks with its set is distinct.
    std::optional<uint32_t> position, group;
    if ((b.kind == GpuBind::Kind::kMap || b.kind == GpuBind::Kind::kMask) && b.sets) {
      const auto& sets = *b.sets;
      auto set_of = [&](uint32_t task) { return sets[task % sets.size()]; };
      const uint64_t mine = set_of(f.local_rank);
      bool partition = true;
      uint32_t before = 0, same = 0;
      for (uint32_t t = 0; t < f.local_task_count; ++t) {
        const uint64_t s = set_of(t);
        if (s == mine) {
          ++same;
          if (t < f.local_rank) ++before;
        } else if ((s & mine) != 0) {
          partition = false;
        }
      }
      if (partition) {
        position = before;
        group = same;
      }
    }
    if (position) {
      index = *position % n;
      d.oversubscribed = *group > n;
      d.why = "position " + std::to_string(*position) + " among the " + std::to_string(*group) +
              " tasks of the node that " + bind_text(b) + " gives " + list;
    } else if (n == 1) {
      index = 0;
      d.why = "the task's only GPU (" + list + ", " + bind_text(b) + ")";
    } else if (b.kind == GpuBind::Kind::kPerTask && b.count == n &&
               (!f.node || f.node->ids.empty() ||
                uint64_t{f.local_task_count} * n <= f.node->ids.size())) {
      index = 0;
      d.why = bind_text(b) + " gives each task " + std::to_string(n) + " GPUs of its own (" + list +
              ")";
    } else if (b.kind == GpuBind::Kind::kMap || b.kind == GpuBind::Kind::kMask) {
      left_to_init(bind_text(b) + " gives tasks of this node GPU sets that overlap (" + list +
                   " here)");
    } else {
      left_to_init(bind_text(b) + " gives this task " + list +
                   ", and other tasks of the node may see the same GPUs (their sets follow their "
                   "CPUs), which one task cannot know");
    }
  }
  if (!index) return d;
  if (bind) {
    d.visible_devices = f.task.ids[*index];
    index = 0;
  }
  d.local_device = index;
  return d;
}

NodeAssignment assign_node_gpus(const std::vector<NodeRankGpus>& ranks) {
  NodeAssignment out;
  const size_t count = ranks.size();
  out.device.assign(count, std::nullopt);
  std::map<std::string, size_t> owner;  // physical GPU -> input position using it
  auto record_shared = [&](size_t a, size_t b, const std::string& gpu) {
    out.shared.push_back({std::min(a, b), std::max(a, b), gpu});
  };
  // Ranks with a device keep it.
  for (size_t i = 0; i < count; ++i) {
    const auto& r = ranks[i];
    if (!r.device || *r.device < 0 || static_cast<size_t>(*r.device) >= r.gpus.size()) continue;
    out.device[i] = *r.device;
    const std::string& gpu = r.gpus[static_cast<size_t>(*r.device)];
    auto [it, fresh] = owner.emplace(gpu, i);
    if (!fresh) record_shared(it->second, i, gpu);
  }
  // The others: each tries its GPUs starting at its position among the ranks
  // with the same list (a shared list gives local rank modulo its length).
  std::vector<std::vector<std::string>> order(count);
  std::map<std::vector<std::string>, size_t> seen;
  for (size_t i = 0; i < count; ++i) {
    const auto& g = ranks[i].gpus;
    size_t pos = seen[g]++;
    if (out.device[i] || g.empty()) continue;
    for (size_t k = 0; k < g.size(); ++k) order[i].push_back(g[(pos + k) % g.size()]);
  }
  // A maximum matching of the remaining ranks to the GPUs nobody kept
  // (augmenting paths; a node has few ranks and GPUs).
  const std::map<std::string, size_t> kept = owner;
  std::map<std::string, size_t> match;
  std::function<bool(size_t, std::map<std::string, bool>&)> augment =
      [&](size_t i, std::map<std::string, bool>& visited) {
        for (const auto& gpu : order[i]) {
          if (kept.count(gpu) != 0 || visited[gpu]) continue;
          visited[gpu] = true;
          auto it = match.find(gpu);
          if (it == match.end() || augment(it->second, visited)) {
            match[gpu] = i;
            return true;
          }
        }
        return false;
      };
  std::vector<size_t> unmatched;
  for (size_t i = 0; i < count; ++i) {
    if (order[i].empty()) continue;
    std::map<std::string, bool> visited;
    if (!augment(i, visited)) unmatched.push_back(i);
  }
  auto index_in = [&](size_t i, const std::string& gpu) {
    const auto& g = ranks[i].gpus;
    return static_cast<int>(std::find(g.begin(), g.end(), gpu) - g.begin());
  };
  for (const auto& [gpu, i] : match) {
    out.device[i] = index_in(i, gpu);
    owner[gpu] = i;
  }
  // No distinct GPU left: share the first of its order, and say with whom.
  for (size_t i : unmatched) {
    const std::string& gpu = order[i].front();
    out.device[i] = index_in(i, gpu);
    auto [it, fresh] = owner.emplace(gpu, i);
    if (!fresh) record_shared(it->second, i, gpu);
  }
  std::sort(out.shared.begin(), out.shared.end(),
            [](const auto& x, const auto& y) { return std::tie(x.a, x.b) < std::tie(y.a, y.b); });
  return out;
}

}  // namespace slurmddp::launch
