(** The least traffic within the memory bound with the exchange among the
    plans ([plan(..., minimal=True)]): [Minimal.mplan_problem]'s plan of
    collectives (the candidate checked and carried to a refinement, its
    peak within [bound m src dst], its traffic certified least of any plan
    of collectives within that bound), or the one-step exchange
    ([Exchange.echeck]: peak [bound m src dst], its worst device receives
    [Traffic.lower_bound m src dst]) where it receives strictly less and can
    run in pieces along a free dimension, as [Exchange.eplan_problem] takes
    it. The exchange receives the lower bound, which no plan goes below, so
    where it is taken no certificate is needed: a candidate whose
    certificate fails ([MNotLeast]) still gives the exchange when the
    exchange receives less than it. The guarantee is
    [Eminimalproof.emplan_spec] and [emplan_least]. *)
From Coq Require Import List Arith Bool.
From VS Require Import Prelude Mesh Types Rules Checker Traffic Validate Pipeline Exchange Minimal.
Import ListNotations.

(** The exchange, where it receives strictly less than [T] and a free
    dimension lets it run in pieces. *)
Definition exchange_below (m : mesh) (src dst : atype) (T : nat) : option (planned report) :=
  match free_dim src dst with
  | Some ch => if lower_bound m src dst <? T then Some (Exchanged (Some ch) (lower_bound m src dst)) else None
  | None => None
  end.

Definition emplan_problem (m : mesh) (src dst : atype) (cand : option plan) (cert : list (atype * nat))
    : result mfail (planned report) :=
  match mplan_problem m src dst cand cert with
  | Ok (fs, p, r) =>
      match exchange_below m src dst (traffic (received r)) with
      | Some x => Ok x
      | None => Ok (Collectives fs p r)
      end
  | Err (MNotLeast T) =>
      match exchange_below m src dst T with
      | Some x => Ok x
      | None => Err (MNotLeast T)
      end
  | Err x => Err x
  end.

(** What a planned answer's worst device receives: the checker's figure
    for a plan of collectives, [rx] for the exchange. *)
Definition planned_traffic (o : planned report) : nat :=
  match o with
  | Collectives _ _ r => traffic (received r)
  | Exchanged _ rx => rx
  end.
