(** The path chosen by [Layoutchoice.lplan], end to end.

    First the link between the two layout models: under a type, a rank's
    box ([Crossmesh.tbox]) holds exactly the global indices the rank holds
    at valid positions ([tbox_exact]), the position of index [x] being
    [unshift (tbox m t c) x] ([tbox_unshift]). So for layouts that come
    from types, "every target rank gets every element of its box" (the box
    schedule, [Boxesworldproof.brounds_correct]) and "every target rank ends
    with its type block" (the type planner, [Exchangeproof.ueplan_spec])
    say the same thing; [lplan_spec] states both branches in boxes. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Refine Uneven Unevenproof Uchecker Ucheckerproof Upipeline Upipelineproof Crossmesh
  Crossmeshproof Rounds Roundsproof Exchange Exchangeproof Boxes Boxesproof Boxesworldproof Layoutchoice.
Import ListNotations.

(** The local position of a global index [x] of a rank's box under a type:
    a valid position, holding [x]. *)
Lemma tbox_unshift : forall m t c x, in_boxb x (tbox m t c) = true ->
  uvalid_pos m t c (unshift (tbox m t c) x) /\ ugindex m t c (unshift (tbox m t c) x) = x.
Proof.
  intros m t c. unfold uvalid_pos, ugindex.
  induction t as [|D t IH]; intros [|x0 x] H; simpl in H; try discriminate.
  - split; [constructor|reflexivity].
  - apply andb_true_iff in H as [H0 H]. destruct (IH x H) as [Hv Hg].
    unfold insideb in H0. simpl in H0. apply andb_true_iff in H0 as [H1 H2].
    apply Nat.leb_le in H1. apply Nat.ltb_lt in H2. unfold ugidx in *.
    simpl. split.
    + constructor; [unfold ugidx; lia|exact Hv].
    + rewrite Hg. unfold ugidx. f_equal. lia.
Qed.

(** **Boxes and types agree**: under a type, the box of a rank holds
    exactly the global indices that rank holds at valid positions. *)
Theorem tbox_exact : forall m t c x,
  in_boxb x (tbox m t c) = true <-> exists i, uvalid_pos m t c i /\ ugindex m t c i = x.
Proof.
  intros m t c x. split.
  - intros H. exists (unshift (tbox m t c) x). apply tbox_unshift; exact H.
  - intros [i [Hi <-]]. rewrite <- shift_tbox. apply tbox_valid; exact Hi.
Qed.

(** The entries of a type's layout: rank [j] of the mesh with its box. *)
Lemma tlayout_nth : forall m t j self T, nth_error (tlayout m t) j = Some (self, T) ->
  j < ndevices m /\ self = j /\ T = tbox m t (coords_of_rank m j).
Proof.
  intros m t j self T E. unfold tlayout in E. rewrite tgts_nth_map, nth_error_map in E.
  destruct (nth_error (seq 0 (ndevices m)) j) as [k|] eqn:Ek; [|discriminate].
  injection E as E1 E2.
  assert (Hj : j < length (seq 0 (ndevices m))) by (apply nth_error_Some; congruence).
  rewrite seq_length in Hj.
  rewrite nth_error_nth' with (d := 0) in Ek by (rewrite seq_length; exact Hj).
  rewrite seq_nth in Ek by exact Hj. injection Ek as <-.
  split; [exact Hj|]. split; [|auto]. rewrite <- E1. unfold ranks. rewrite seq_nth by exact Hj. reflexivity.
Qed.

(** An entry of a type's layout holding some index, wherever a layout with
    the same non-empty boxes lists it: rank [self] of the mesh with its box. *)
Lemma held_part_tlayout : forall m t l self T, held_part l = held_part (tlayout m t) ->
  In (self, T) l -> nonempty T = true ->
  self < ndevices m /\ T = tbox m t (coords_of_rank m self).
Proof.
  intros m t l self T E H Hn.
  assert (H' : In (self, T) (held_part (tlayout m t))) by (rewrite <- E; apply filter_In; auto).
  apply filter_In in H' as [H' _]. apply In_nth_error in H' as [j Ej].
  destruct (tlayout_nth _ _ _ _ _ Ej) as [Hj [-> ->]]. auto.
Qed.

(** **The choice, end to end**: [lplan] takes the type planner only when
    the proposed types describe exactly the two layouts (the same non-empty
    boxes in the same order: rank [j] of the mesh holding its type box) and
    form a valid problem; then, in its
    two answers, every target rank ends with every index [x] of its box
    holding the element [A x] of any global array (at its local position
    [unshift T x], a valid position by [tbox_unshift]): after the
    collectives run on the padded source distribution, or assembled by the
    exchange, where each rank receives exactly the elements of its box it
    does not hold. Otherwise it returns the box schedule, of which
    [boxes_ok] holds whenever every source box has its target boxes'
    number of dimensions: every target rank gets every index of its box
    that some rank holds exactly once, from a rank holding it, receiving
    exactly what it does not hold. *)
Theorem lplan_spec : forall budget m types ls lt,
  match lplan budget m types ls lt with
  | ByTypes t t' out =>
      types = Some (t, t') /\ held_part ls = held_part (tlayout m t) /\ held_part lt = held_part (tlayout m t') /\
      uvalid_problem m t t' /\ ueplan_problem m t t' = Ok out /\
      match out with
      | Collectives fs p r =>
          uplan_problem m t t' = Ok (fs, p, r) /\ ucheck (rmesh fs) (rtype fs t) (rtype fs t') p = Ok r /\
          forall self T, In (self, T) lt ->
          forall V (A : list nat -> V) pad x, in_boxb x T = true ->
            uexec pad (rmesh fs) (rtype fs t) p (ulocal A pad (rmesh fs) (rtype fs t))
              (coords_of_rank (rmesh fs) self) (unshift T x) = A x
      | Exchanged _ rx =>
          exists pss, exchange m t t' = Some pss /\ rx = exchange_recv m pss /\
          forall self T, In (self, T) lt -> nonempty T = true ->
            Crossmesh.traffic self (nth self pss []) = vol T - held (sdims m t) (srcs m (ranks m) t) self T /\
            forall V (A : list nat -> V) pad x, in_boxb x T = true ->
              assemble (fun r => ulocal A pad m t (coords_of_rank m r)) (sdims m t) T (nth self pss []) (unshift T x)
              = Some (A x)
      end
  | ByBoxes rds =>
      rds = brounds budget ls lt /\
      ((forall tg, In tg lt -> src_dims (length (snd tg)) ls) -> boxes_ok budget ls lt rds)
  end.
Proof.
  intros budget m types ls lt.
  assert (Hb : (forall tg, In tg lt -> src_dims (length (snd tg)) ls) ->
               boxes_ok budget ls lt (brounds budget ls lt)) by (intros H; apply brounds_correct; exact H).
  unfold lplan.
  destruct types as [[t t']|]; [|split; [reflexivity|exact Hb]].
  destruct (layout_eqb (held_part ls) (held_part (tlayout m t))
            && layout_eqb (held_part lt) (held_part (tlayout m t'))) eqn:Eq;
    [|split; [reflexivity|exact Hb]].
  destruct (ueplan_problem m t t') as [out|e] eqn:Ep; [|split; [reflexivity|exact Hb]].
  apply andb_true_iff in Eq as [E1 E2]. unfold layout_eqb in E1, E2.
  destruct (layout_eq_dec (held_part ls) (held_part (tlayout m t))) as [Hls|]; [|discriminate].
  destruct (layout_eq_dec (held_part lt) (held_part (tlayout m t'))) as [Hlt|]; [|discriminate].
  assert (Hv : uvalid_problem m t t').
  { unfold ueplan_problem, uplan_problem in Ep.
    destruct (uproblem_error m t t') eqn:Ee; [discriminate|]. apply uproblem_error_spec; exact Ee. }
  split; [reflexivity|]. split; [exact Hls|]. split; [exact Hlt|]. split; [exact Hv|]. split; [exact Ep|].
  destruct (ueplan_spec m t t' Hv) as [out' [Ep' Hs]]. rewrite Ep in Ep'. injection Ep' as <-.
  destruct out as [fs p r|och rx].
  - destruct (uplan_spec m t t' Hv) as [fs' [p' [r' [Hpp [_ [_ [Hck [_ Hex]]]]]]]].
    rewrite Hs in Hpp. injection Hpp as <- <- <-.
    split; [exact Hs|]. split; [exact Hck|].
    intros self T Hin V A pad x Hx.
    destruct (held_part_tlayout _ _ _ _ _ Hlt Hin (in_nonempty _ _ Hx)) as [Hj ->].
    destruct (tbox_unshift _ _ _ _ Hx) as [Hvp Hg].
    rewrite (Hex V A pad self _ Hj Hvp), Hg. reflexivity.
  - destruct Hs as [fs [p [r [pss [_ [Ex [Hrx [_ [_ [Htr Hdat]]]]]]]]]].
    exists pss. split; [exact Ex|]. split; [exact Hrx|].
    intros self T Hin Hn. destruct (held_part_tlayout _ _ _ _ _ Hlt Hin Hn) as [Hj ->].
    split; [exact (Htr self Hj)|].
    intros V A pad x Hx. destruct (tbox_unshift _ _ _ _ Hx) as [Hvp Hg].
    rewrite (Hdat V A (ulocal A pad m t)); [rewrite Hg; reflexivity| |exact Hj|exact Hvp].
    intros r0 k _ Hk. unfold ulocal. apply uvalid_posb_spec in Hk. rewrite Hk. reflexivity.
Qed.
