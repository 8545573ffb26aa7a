#pragma once
// wmap.Plan: a validated plan with everything it was made from (its LoaderSession: plugins,
// storage); wmap.load(plan) and wmap.load_into(plan, ...) run exactly it (no second planning).

#include <memory>

#include "wmap/loader/loader.h"

namespace wmap::python {

// A session and its prepared plan, shared by a wmap.Plan, the loads made from it and (the
// session: its plugins' library handles) every tensor they return.
struct Prepared {
  std::shared_ptr<const wmap::LoaderSession> session;
  std::shared_ptr<const wmap::PreparedLoad> prepared;
};

class Plan {
 public:
  explicit Plan(Prepared p) : p_(std::move(p)) {}
  const wmap::LoadPlan& plan() const { return *p_.prepared->plan; }
  const wmap::PreparedLoad& prepared() const { return *p_.prepared; }
  const Prepared& shared() const { return p_; }

 private:
  Prepared p_;
};

}  // namespace wmap::python
