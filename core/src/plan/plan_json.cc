// The plan as data: its JSON (`wmap plan --json`), its id (the SHA-256 of its canonical JSON) and
// the schedule's JSON.
#include <mutex>

#include "plan_builder.h"
#include "wmap/plan/load_plan.h"
#include "wmap/util/json_text.h"
#include "wmap/util/sha256.h"

namespace wmap {

std::string LoadPlan::plan_id() const {
  std::call_once(id_cache_->once, [this] { id_cache_->id = sha256_hex(json_text(false)); });
  return id_cache_->id;
}

std::string LoadPlan::to_json() const { return json_text(true); }

std::string LoadPlan::json_text(bool with_id) const {
  std::string o = "{\"format\":\"wmap-plan\",\"version\":10";
  if (with_id) o += ",\"plan_id\":\"" + plan_id() + "\"";
  o += ",\"catalog_id\":\"" + catalog_id() + "\",\"plugin\":" + json_string(plugin_) +
       ",\"architecture\":" + json_string(architecture_);
  o += ",\"layout\":" + layout_.to_json();
  // The checkpoint's quantisation (quant_method and scheme), null when it has none.
  o += ",\"quantization\":" + (quant_format_.kind == QuantFormat::Kind::kNone
                                   ? std::string("null")
                                   : "{\"method\":" + json_string(quant_format_.method) +
                                         ",\"scheme\":" + json_string(quant_format_.scheme) + "}");
  o += ",\"ok\":" + std::string(ok() ? "true" : "false") + ",\"coverage\":" + json_string(coverage());
  o +=
      ",\"bytes_to_load\":" + std::to_string(bytes_to_load()) + ",\"bytes_to_read\":" + std::to_string(bytes_to_read());
  const CertificateTotals t = totals_of(certificates_, params_);
  o += ",\"certificate\":{\"params\":" + std::to_string(t.checked) + ",\"certified\":" + std::to_string(t.certified) +
       ",\"ranges\":" + std::to_string(t.ranges) + ",\"bytes\":" + std::to_string(t.bytes) +
       ",\"scaled\":" + std::to_string(t.scaled) + ",\"ok\":" + (t.certified == t.checked ? "true" : "false") + "}";
  o += ",\"problems\":[";
  for (size_t i = 0; i < problems_.size(); ++i) {
    o += (i ? ",\n" : "\n") + std::string("{\"kind\":\"") + std::string(problem_kind_name(problems_[i].kind)) +
         "\",\"key\":" + json_string(problems_[i].key) + ",\"message\":" + json_string(problems_[i].message) + "}";
  }
  o += "],\"params\":[";
  auto dims = [](const std::vector<uint64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    o += (i ? ",\n" : "\n") + std::string("{\"name\":") + json_string(p.name) + ",\"module\":" + json_string(p.module) +
         ",\"dtype\":\"" + std::string(dtype_name(p.dtype)) + "\",\"shape\":" + dims(p.shape) +
         ",\"nbytes\":" + std::to_string(p.nbytes);
    if (!p.alias_of.empty()) o += ",\"alias_of\":" + json_string(p.alias_of);
    if (p.converts()) {
      o += ",\"convert\":{\"kind\":\"" + std::string(conversion_name(p.convert.kind)) + "\"";
      if (p.convert.kind == Conversion::Kind::kFp8BlockDequant) {
        o += ",\"rows\":" + std::to_string(p.convert.rows) + ",\"cols\":" + std::to_string(p.convert.cols) +
             ",\"block\":[" + std::to_string(p.convert.block_rows) + "," + std::to_string(p.convert.block_cols) + "]";
      }
      if (p.convert.kind == Conversion::Kind::kFp8Requant) {
        o += ",\"parts\":" + dims(p.convert.parts) + ",\"group\":" + std::to_string(p.convert.group);
      }
      if (p.convert.kind == Conversion::Kind::kBlockScaleSwizzle) {
        o += ",\"rows\":" + std::to_string(p.convert.rows) + ",\"cols\":" + std::to_string(p.convert.cols) +
             ",\"padded\":[" + std::to_string(p.convert.pad_rows) + "," + std::to_string(p.convert.pad_cols) + "]";
      }
      if (p.convert.kind == Conversion::Kind::kNvfp4Scales) {
        o += ",\"op\":\"" + std::string(scale_op_name(p.convert.scale_op)) +
             "\",\"group\":" + std::to_string(p.convert.group) + ",\"tail\":" + std::to_string(p.convert.tail);
      }
      if (p.convert.kind == Conversion::Kind::kConcatColumns) {
        o += ",\"rows\":" + std::to_string(p.convert.rows) + ",\"parts\":" + dims(p.convert.parts);
      }
      if (p.convert.kind == Conversion::Kind::kScaleMax) {
        o += ",\"group\":" + std::to_string(p.convert.group) + ",\"tail\":" + std::to_string(p.convert.tail);
      }
      if (p.convert.invert) o += ",\"invert\":true";
      o += ",\"assembled_bytes\":" + std::to_string(p.assembled_bytes) + "}";
    }
    if (p.absent) o += ",\"absent\":true";
    if (!p.must_match.empty()) {
      o += ",\"must_match\":[";
      for (size_t j = 0; j < p.must_match.size(); ++j) {
        o += (j ? ",[" : "[") + json_string(p.must_match[j].first->name) + "," +
             json_string(p.must_match[j].second->name) + "]";
      }
      o += "]";
      if (p.must_match_close) o += ",\"must_match_close\":true";
    }
    if (!p.scales.empty()) {
      o += ",\"scales\":[";
      for (size_t j = 0; j < p.scales.size(); ++j) o += (j ? "," : "") + json_string(p.scales[j]);
      o += "]";
    }
    if (const ParamCertificate& c = certificates_[i]; c.checked) {
      o += ",\"coverage\":{\"ranges\":" + std::to_string(c.ranges) + ",\"bytes\":" + std::to_string(c.bytes) +
           ",\"ok\":" + (c.ok ? "true" : "false") + "}";
    }
    o += ",\"pieces\":[";
    for (size_t j = 0; j < p.pieces.size(); ++j) {
      const auto& q = p.pieces[j];
      o += j ? "," : "";
      if (!q.record) {
        o += "{\"zeros\":" + std::to_string(q.out_bytes) + "}";
        continue;
      }
      o += "{\"source\":" + json_string(q.source) + ",\"key\":" + json_string(q.record->name) +
           ",\"shard\":" + std::to_string(q.record->shard) + ",\"span\":[" + std::to_string(q.span_begin) + "," +
           std::to_string(q.span_end) + "],\"bytes\":" + std::to_string(q.out_bytes) + ",\"view\":" + dims(q.view) +
           ",\"box\":[";
      for (size_t d = 0; d < q.box.size(); ++d) {
        o += (d ? ",[" : "[") + std::to_string(q.box[d].begin) + "," + std::to_string(q.box[d].end) + "]";
      }
      o += "],\"perm\":[";
      for (size_t d = 0; d < q.perm.size(); ++d) o += (d ? "," : "") + std::to_string(q.perm[d]);
      o += "]";
      if (q.padded()) o += ",\"pad\":" + dims(q.pad);
      if (!q.reverse.empty()) {
        o += ",\"reverse\":[";
        bool first = true;
        for (size_t d = 0; d < q.reverse.size(); ++d) {
          if (!q.reverse[d]) continue;
          o += (first ? "" : ",") + std::to_string(d);
          first = false;
        }
        o += "]";
      }
      if (!q.transform.empty()) o += ",\"transform\":" + json_string(q.transform);
      o += "}";
    }
    o += "]}";
  }
  o += "],\"read_order\":[";
  for (size_t i = 0; i < read_order_.size(); ++i) o += (i ? "," : "") + std::to_string(read_order_[i]);
  o += "],\"schedule\":" + schedule_json() + "}\n";
  return o;
}

// The units in claim order, one compact array each (fields named once): what a load reads,
// how, and which byte ranges it releases after each unit. Segments are counted, not listed:
// they follow from the pieces and chunk_bytes.
std::string LoadPlan::schedule_json() const {
  std::string o =
      "{\"chunk_bytes\":" + std::to_string(schedule_.chunk_bytes()) +
      ",\"max_read_gap\":" + std::to_string(schedule_.max_read_gap()) +
      ",\"unit_fields\":[\"kind\",\"shard\",\"begin\",\"end\",\"segments\",\"param\",\"piece\",\"releases\"]"
      ",\"units\":[";
  const auto& units = schedule_.units();
  for (size_t i = 0; i < units.size(); ++i) {
    const ReadUnit& u = units[i];
    o += (i ? ",\n[\"" : "\n[\"") + std::string(unit_kind_name(u.kind)) + "\",";
    if (u.kind == ReadUnit::Kind::kZero) {
      o += "null,0,0,0,";
    } else {
      o += std::to_string(u.shard) + "," + std::to_string(u.begin) + "," + std::to_string(u.end) + "," +
           std::to_string(u.segments) + ",";
    }
    o += u.kind == ReadUnit::Kind::kRead ? "null,null,["
                                         : std::to_string(u.param) + "," + std::to_string(u.piece) + ",[";
    bool first = true;
    for (const ByteRange& r : schedule_.releases(u)) {
      o += (first ? "" : ",") + std::to_string(r.begin) + "," + std::to_string(r.end);
      first = false;
    }
    o += "]]";
  }
  return o + "]}";
}

}  // namespace wmap
