(** The transfer lower bound for partial problems: every plan the partial
    checker accepts makes some device receive at least [Traffic.lower_bound]
    of the array types ([ptyp src], [ptyp dst]). The argument of
    [Trafficproof.v] carries over: a device's block changes only through
    the four collectives, whose received figure covers what it gets from
    others ([from_others_le_recv]); an all-reduce or a to-partial keeps the
    block, and a reduce-scatter shrinks it exactly as a slice does (what it
    keeps it held). So every element of its target block that a device did
    not hold in the source block arrives in some step.

    This bound counts positions only: it says nothing of the reduction's own
    traffic (an all-reduce over a block the device already covers needs no
    position, yet moves data), so it is a lower bound, not the least
    traffic. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Traffic Trafficproof Partial
  Partialproof Pchecker.
Import ListNotations.

(** A reduce-scatter's type change is a slice's. *)
Lemma reducescatter_slice : forall m P t d xs D,
  pwf m (mkptype P t) -> nth_error t d = Some D -> xs <> [] -> NoDup xs -> (forall a, In a xs -> In a P) ->
  Nat.divide (nprod m xs) (lsize m D) ->
  step m t (DynSlice d xs) (set_nth t d (mkdim (axes D ++ xs) (gsize D))).
Proof.
  intros m P t d xs D [Hwf [_ [Hlt Hdis]]] E Hne Hnd Hin Hdiv. cbn [paxes ptyp] in *.
  apply step_slice; auto.
Qed.

(** One step: what a device misses afterwards it missed before or received. *)
Lemma pmissing_step : forall m h pt op pt' c, pwf m pt -> pstep m pt op pt' -> valid m c ->
  missing m h (ptyp pt') c <= precv m pt op pt' + missing m h (ptyp pt) c.
Proof.
  intros m h pt op pt' c Hwf Hs Hc. pose proof Hwf as [Ht _].
  destruct Hs as [P t op' t' Hst _|P t xs _ _ _|P t d xs D E Hne Hnd Hin Hdiv|P t xs _ _ _ _ _];
    cbn [ptyp precv] in *.
  - pose proof (missing_step m h t op' t' c Ht Hst Hc).
    pose proof (from_others_le_recv m t op' t' c Ht Hst Hc). lia.
  - lia.
  - assert (Hst : step m t (DynSlice d xs) (set_nth t d (mkdim (axes D ++ xs) (gsize D))))
      by (eapply reducescatter_slice; eauto).
    pose proof (missing_step m h t _ _ c Ht Hst Hc).
    pose proof (from_others_le_recv m t _ _ c Ht Hst Hc) as Hr. cbn [recv] in Hr.
    match goal with |- _ <= ?z + _ => generalize z end. intros z. lia.
  - lia.
Qed.

Lemma pmissing_trace : forall m h c pt p ts rs, ptrace m pt p ts rs -> pwf m pt -> valid m c ->
  missing m h (ptyp (last ts pt)) c <= missing m h (ptyp pt) c + traffic rs.
Proof.
  intros m h c pt p ts rs Htr. induction Htr as [pt|pt op pt1 p ts rs Hs Htr IH]; intros Hwf Hc.
  - simpl. lia.
  - pose proof (ptrace_nonempty _ _ _ _ _ Htr) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts pt pt1) by exact Hne.
    pose proof (IH (pstep_wf m pt op pt1 Hwf Hs) Hc) as H1.
    pose proof (pmissing_step m h pt op pt1 c Hwf Hs Hc) as H2.
    cbn [traffic fold_right]. fold (traffic rs). lia.
Qed.

(** **Partial traffic, per device**: every accepted plan makes device [c]
    receive at least [need] of the array types: its target block less what
    it holds of it in the source. *)
Theorem pcheck_traffic_need : forall m src dst p r c,
  pcheck m src dst p = Ok r -> valid m c -> need m (ptyp src) (ptyp dst) c <= traffic (preceived r).
Proof.
  intros m src dst p r c Hchk Hc.
  apply pcheck_ok in Hchk as [[Hs [Hd Hg]] [Htr [Hlast _]]].
  pose proof (pmissing_trace m (holds m (ptyp src) c) c src p (ptypes r) (preceived r) Htr Hs Hc) as Hmiss.
  rewrite Hlast in Hmiss.
  assert (Hmiss0 : missing m (holds m (ptyp src) c) (ptyp src) c = 0).
  { unfold missing. apply filter_length_none. intros i Hi. apply lindices_In in Hi.
    rewrite holds_source; auto. }
  assert (Hlen : length (ptyp src) = length (ptyp dst)).
  { rewrite <- (map_length gsize (ptyp src)), <- (map_length gsize (ptyp dst)), Hg. reflexivity. }
  pose proof (filter_length_split _ (fun i => holds m (ptyp src) c (gindex m (ptyp dst) c i))
                (lindices m (ptyp dst))) as S.
  rewrite count_holds, lindices_length in S by exact Hlen.
  unfold missing in Hmiss, Hmiss0. unfold need. lia.
Qed.

(** **Partial traffic**: no plan the partial checker accepts receives less
    than the lower bound of its array types. *)
Theorem pcheck_traffic_lower_bound : forall m src dst p r,
  pcheck m src dst p = Ok r -> lower_bound m (ptyp src) (ptyp dst) <= traffic (preceived r).
Proof.
  intros m src dst p r Hchk. pose proof Hchk as Hchk'. apply pcheck_ok in Hchk' as [[Hs _] _].
  apply fold_max_devices; [apply Hs|]. intros c Hc. apply (pcheck_traffic_need m src dst p r); auto.
Qed.
