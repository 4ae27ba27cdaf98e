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
From VS Require Import Prelude Mesh Types Uneven Unevenproof Uchecker Upipeline Upipelineproof Crossmesh
  Crossmeshproof Rounds Exchange Exchangeproof Boxes Boxesproof Boxesworldproof Layoutchoice.
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
