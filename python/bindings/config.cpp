// Python binding of the run config: myriad.Config.
//
// Every key is read and written through the generic key access of config/config_keys.h, which
// walks the field tables: cfg["training.micro_batch"] (a bool / int / float / str / list, None
// for auto), cfg["training.lr"] = 3e-4 (the per-key checks of a --set override), "training.steps"
// in cfg, cfg.keys(), cfg.to_dict() ({section: {key: value}}, the layout of to_yaml()). Values in
// use come from cfg.resolved()[key]; the values no key holds (padded vocabulary, head width, ...)
// from cfg.derived(). No key has code of its own here: a key added to a table is readable at once.
// An unknown key raises KeyError naming the closest key; a bad value raises myriad.Error.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "myriad/config/config_keys.h"
#include "myriad/config/derived_values.h"
#include "myriad/config/run_config.h"

namespace py = pybind11;

namespace myriad::python {

namespace {

py::object to_python(const FieldValue& value) {
  struct Converter {
    py::object operator()(std::monostate) const { return py::none(); }
    py::object operator()(bool b) const { return py::bool_(b); }
    py::object operator()(std::int64_t i) const { return py::int_(i); }
    py::object operator()(double d) const { return py::float_(d); }
    py::object operator()(const std::string& s) const { return py::str(s); }
    py::object operator()(const std::vector<std::string>& list) const { return py::cast(list); }
  };
  return std::visit(Converter{}, value);
}

FieldValue from_python(const py::handle& value, const std::string& key) {
  if (value.is_none()) return std::monostate{};
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<std::int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    std::vector<std::string> items;
    for (const py::handle item : value) {
      if (!py::isinstance<py::str>(item)) {
        throw py::type_error("Config['" + key + "']: list members must be strings, got " +
                             py::str(py::type::of(item).attr("__name__")).cast<std::string>());
      }
      items.push_back(item.cast<std::string>());
    }
    return items;
  }
  throw py::type_error("Config['" + key + "']: expected None, bool, int, float, str or a list of str, got " +
                       py::str(py::type::of(value).attr("__name__")).cast<std::string>());
}

// Raises KeyError (naming the closest key) when `key` names no config key.
void require_key(const std::string& key) {
  const std::string problem = config_key_problem(key);
  if (!problem.empty()) throw py::key_error(problem);
}

}  // namespace

void bind_config(py::module_& m) {
  py::class_<RunConfig>(m, "Config", "Run configuration (see docs/config.md); keys as cfg['section.key']")
      .def_static("from_file", &RunConfig::from_yaml_file, py::arg("path"))
      .def_static("from_string", &RunConfig::from_yaml_string, py::arg("text"), py::arg("source_name") = "<string>")
      .def(
          "copy", [](const RunConfig& c) { return c; },
          "an independent copy (what a search that tries many overrides on one parsed file starts from)")
      .def("__copy__", [](const RunConfig& c) { return c; })
      .def("set", &RunConfig::apply_override, py::arg("key_equals_value"), "apply one 'section.key=value' override")
      .def(
          "validate",
          [](RunConfig& c, int world_size) {
            c.validate(world_size);
            c = c.for_world(world_size);  // parallel.dp auto becomes the world's data-parallel share
          },
          py::arg("world_size") = 1,
          "checks every key for a job of world_size processes; fills parallel.dp when it is auto (0)")
      .def("for_world", &RunConfig::for_world, py::arg("world_size"),
           "a copy with parallel.dp auto (0) settled for world_size processes (nothing checked)")
      .def("resolved", &RunConfig::resolved, "a copy with every derived key filled in (the values in use)")
      .def("to_yaml", &RunConfig::to_yaml)
      .def(
          "__getitem__",
          [](const RunConfig& c, const std::string& key) {
            require_key(key);
            return to_python(config_value(c, key));
          },
          py::arg("key"), "the stored value of 'section.key' (None for auto)")
      .def(
          "__setitem__",
          [](RunConfig& c, const std::string& key, const py::handle& value) {
            require_key(key);
            set_config_value(c, key, from_python(value, key));
          },
          py::arg("key"), py::arg("value"), "set 'section.key' with the per-key checks of a --set override")
      .def(
          "__contains__", [](const RunConfig&, const std::string& key) { return config_key_problem(key).empty(); },
          py::arg("key"))
      .def(
          "keys", [](const RunConfig&) { return config_keys(); }, "every key as 'section.key', in file order")
      .def("__iter__", [](const RunConfig&) { return py::iter(py::cast(config_keys())); })
      .def(
          "to_dict",
          [](const RunConfig& c) {
            py::dict out;
            for (const std::string& key : config_keys()) {
              const std::size_t dot = key.find('.');
              const py::str section(key.substr(0, dot));
              if (!out.contains(section)) out[section] = py::dict();
              out[section][py::str(key.substr(dot + 1))] = to_python(config_value(c, key));
            }
            return out;
          },
          "{section: {key: value}} of every key (the layout of to_yaml(); None for auto)")
      .def(
          "derived",
          [](const RunConfig& c) {
            py::dict out;
            for (const DerivedValue& d : derived_values()) out[py::str(d.path)] = to_python(d.get(c));
            return out;
          },
          "{'section.name': value} of the values in use that no key holds (config/derived_values.h)");
}

}  // namespace myriad::python
