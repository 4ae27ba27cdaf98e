(** A function applied along a dimension that no axis shards commutes with
    distribution, and composes with the data theorems of the redistributions
    around it ([Semantics.movement_correct], [Exec.check_exec]). *)
From Coq Require Import List Arith Lia.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Exec Commute Uneven Unevenproof Crossmesh
  Refine Pipeline Pipelineproof Exchange Exchangeproof.
Import ListNotations.

Lemma gidx_unsharded : forall m D c k, axes D = [] -> gidx m D c k = k.
Proof. intros m D c k H. unfold gidx, block, mr. rewrite H. reflexivity. Qed.

Lemma lsize_unsharded : forall m D, axes D = [] -> lsize m D = gsize D.
Proof. intros m D H. unfold lsize. rewrite H. simpl. apply Nat.div_1_r. Qed.

(** Device [c]'s global index of its local index [i] with position [d] set
    to [k] is the global index of [i] with position [d] set to [k]. *)
Lemma gindex_set_unsharded : forall m t t' d c i k, along_ok t t' d -> length i = length t' ->
  set_nth (gindex m t' c i) d k = gindex m t c (set_nth i d k).
Proof.
  intros m t t' d c i k [Hlen [Hd [Ht [Ht' Hj]]]] Hi.
  apply nth_ext with (d := 0) (d' := 0).
  - rewrite set_nth_length, !gindex_length; rewrite ?set_nth_length; lia.
  - intros j Hjl. rewrite set_nth_length, gindex_length in Hjl by lia.
    rewrite (gindex_nth m t) by (rewrite ?set_nth_length; lia).
    destruct (Nat.eq_dec j d) as [->|Hne].
    + rewrite !nth_set_nth_eq by (rewrite ?gindex_length; lia).
      symmetry. apply gidx_unsharded; auto.
    + rewrite !nth_set_nth_neq by auto. rewrite gindex_nth by lia. rewrite Hj by auto. reflexivity.
Qed.

(** The commuting theorem: every device applying [f] along [d] to its local
    array computes its block of [f] applied to the global array. *)
Theorem along_commutes : forall V W (f : list nat -> list V -> nat -> W) (A : list nat -> V) m t t' d c i,
  along_ok t t' d -> in_range m t' i ->
  along_local f d m t t' c (local A m t c) i = local (along f d (gsize (nth d t dflt)) A) m t' c i.
Proof.
  intros V W f A m t t' d c i Hok Hi.
  assert (Hli : length i = length t') by (clear Hok; unfold in_range in Hi; induction Hi; simpl; lia).
  pose proof Hok as [Hlen [Hd [Ht [Ht' _]]]].
  unfold along_local, along, local. rewrite lsize_unsharded by auto.
  rewrite gindex_nth by lia. rewrite gidx_unsharded by auto.
  f_equal. unfold fiber. apply map_ext. intros k.
  now rewrite (gindex_set_unsharded m t t' d c i k Hok Hli).
Qed.

(** Composed with one redistribution step ([movement_correct]): devices that
    apply [f] locally and then move the result by any well-typed step hold
    the step's target distribution of [f] applied to the global array. *)
Theorem along_then_step : forall V W (f : list nat -> list V -> nat -> W) (A : list nat -> V) m t t1 op t2 d c i,
  along_ok t t1 d -> wf m t1 -> step m t1 op t2 -> valid m c -> in_range m t2 i ->
  let (c', i') := source m t1 op t2 c i in
  along_local f d m t t1 c' (local A m t c') i' = local (along f d (gsize (nth d t dflt)) A) m t2 c i.
Proof.
  intros V W f A m t t1 op t2 d c i Hok Hwf Hs Hc Hi.
  pose proof (source_sound m t1 op t2 c i Hwf Hs Hc Hi) as Hsrc.
  pose proof (movement_correct W (along f d (gsize (nth d t dflt)) A) m t1 op t2 c i Hwf Hs Hc Hi) as Hmv.
  destruct (source m t1 op t2 c i) as [c' i']. destruct Hsrc as [_ [Hi' _]].
  rewrite along_commutes by auto. exact Hmv.
Qed.

(** Composed with a whole plan ([check_exec]): for every plan the checker
    accepts from the output type [src] of the local step to [dst] (every plan
    [verishard.plan] returns is one over its split of the mesh,
    [Pipelineproof.plan_spec]; [along_then_pipeline] states it there), running it
    on what the devices computed locally gives every device its [dst] block
    of [f] applied to the global array. *)
Theorem along_then_plan : forall V W (f : list nat -> list V -> nat -> W) (A : list nat -> V) m t src dst p r d,
  along_ok t src d -> check m src dst p = Ok r ->
  forall c i, valid m c -> in_range m dst i ->
  exec m src p (fun c' => along_local f d m t src c' (local A m t c')) c i
  = local (along f d (gsize (nth d t dflt)) A) m dst c i.
Proof.
  intros V W f A m t src dst p r d Hok Hck c i Hc Hi.
  assert (Hacc : exists r, check m src dst p = Ok r) by (exists r; exact Hck).
  apply check_accepts_iff_chain in Hacc as [[Hsrc _] Hch].
  apply (exec_agree W (along f d (gsize (nth d t dflt)) A) m src p dst Hsrc Hch); auto.
  intros c' i' _ Hi'. apply along_commutes; auto.
Qed.

(** Composed with the exchange ([Exchangeproof.uexchange_correct]): for every
    valid problem from the output type [src] of the local step to [dst],
    every device assembling its exchange schedule from what the devices
    computed locally gets its [dst] block of [f] applied to the global
    array. With [along_then_plan] this covers every plan
    [verishard.plan(..., exchange=True)] returns on even types without
    pending axes ([Exchangeproof.eplan_spec]: a plan the checker accepts
    over a split of the mesh, or the exchange): [along_then_eplan]. *)
Theorem along_then_exchange : forall V W (f : list nat -> list V -> nat -> W) (A : list nat -> V) m t src dst pss d,
  along_ok t src d -> valid_problem m src dst -> exchange m src dst = Some pss ->
  forall j i, j < ndevices m -> in_range m dst i ->
  assemble (fun r => along_local f d m t src (coords_of_rank m r) (local A m t (coords_of_rank m r)))
    (sdims m src) (tbox m dst (coords_of_rank m j)) (nth j pss []) i
  = Some (local (along f d (gsize (nth d t dflt)) A) m dst (coords_of_rank m j) i).
Proof.
  intros V W f A m t src dst pss d Hok Hv Hx j i Hj Hi.
  pose proof Hv as [Hs [Hd _]].
  assert (Hm : wf_mesh m) by apply Hs.
  rewrite (uexchange_correct m src dst pss Hx (valid_uvalid_problem m src dst Hv) W
             (along f d (gsize (nth d t dflt)) A)
             (fun c k => along_local f d m t src c (local A m t c) k)).
  - unfold local. rewrite ugindex_gindex by exact Hd. reflexivity.
  - intros r k Hr Hk. rewrite along_commutes by (auto; eapply uvalid_pos_even; eauto using coords_of_rank_valid).
    unfold local. rewrite ugindex_gindex by exact Hs. reflexivity.
  - exact Hj.
  - apply (uvalid_pos_even m dst (coords_of_rank m j) i Hd (coords_of_rank_valid m j Hm)). exact Hi.
Qed.


(** A step along an unsharded dimension stays one over a split of the mesh. *)
Lemma along_ok_refine : forall fs t t' d, along_ok t t' d -> along_ok (rtype fs t) (rtype fs t') d.
Proof.
  intros fs t t' d [Hlen [Hd [Ht [Ht' Hj]]]].
  assert (Hn : forall u j, nth j (rtype fs u) dflt = rdim fs (nth j u dflt)).
  { intros u j. unfold rtype. change dflt with (rdim fs dflt) at 1. apply map_nth. }
  assert (Hl : forall u, length (rtype fs u) = length u) by (intros; apply map_length).
  split; [rewrite !Hl; auto|]. split; [rewrite Hl; auto|].
  rewrite !Hn. unfold rdim at 1 2. cbn [axes]. rewrite Ht, Ht'.
  split; [reflexivity|]. split; [reflexivity|]. intros j Hjd. rewrite !Hn, Hj by auto. reflexivity.
Qed.

(** **End to end, the pipeline's plan** ([verishard.plan] between even
    types, [Pipeline.plan_problem]; what the sharded Monarch layer of
    [verishard.butterfly] runs): for every valid problem from the output
    type [src] of a function applied along an unsharded dimension [d] to
    [dst], the pipeline answers with a plan over a split [fs] of [m];
    each device's local output read over the split holds the same elements
    the device computed over [m], and running the plan on it gives every
    device its [dst] block of [f] applied to the global array. *)
Theorem along_then_pipeline : forall V W (f : list nat -> list V -> nat -> W) (A : list nat -> V) m t src dst d,
  along_ok t src d -> valid_problem m src dst ->
  exists fs p r, plan_problem m src dst = Ok (fs, p, r) /\
  (forall n i, n < ndevices m -> in_range m src i ->
     along_local f d (rmesh fs) (rtype fs t) (rtype fs src) (coords_of_rank (rmesh fs) n)
       (local A (rmesh fs) (rtype fs t) (coords_of_rank (rmesh fs) n)) i
     = along_local f d m t src (coords_of_rank m n) (local A m t (coords_of_rank m n)) i) /\
  (forall n i, n < ndevices m -> in_range m dst i ->
     exec (rmesh fs) (rtype fs src) p
       (fun c => along_local f d (rmesh fs) (rtype fs t) (rtype fs src) c (local A (rmesh fs) (rtype fs t) c))
       (coords_of_rank (rmesh fs) n) i
     = local (along f d (gsize (nth d t dflt)) A) m dst (coords_of_rank m n) i).
Proof.
  intros V W f A m t src dst d Hok Hv.
  pose proof Hv as [Hsrc [Hdst _]]. assert (Hm : wf_mesh m) by apply Hsrc.
  destruct (plan_spec m src dst Hv) as [fs [p [r [Hpp [Hs [Hnd [Hc _]]]]]]].
  exists fs, p, r. split; [exact Hpp|].
  pose proof (along_ok_refine fs t src d Hok) as Hok'.
  assert (Hg : gsize (nth d (rtype fs t) dflt) = gsize (nth d t dflt)).
  { unfold rtype. change dflt with (rdim fs dflt) at 1. rewrite map_nth. reflexivity. }
  assert (Hvalid : forall n, valid (rmesh fs) (coords_of_rank (rmesh fs) n))
    by (intros; apply coords_of_rank_valid, (wf_rmesh m); auto).
  split.
  - intros n i Hn Hi.
    rewrite (along_commutes V W f A (rmesh fs)) by (auto; apply refine_in_range with m; auto).
    rewrite along_commutes by auto. rewrite Hg. apply refine_local; auto.
  - intros n i Hn Hi.
    rewrite (along_then_plan V W f A (rmesh fs) (rtype fs t) (rtype fs src) (rtype fs dst) p r d Hok' Hc)
      by (auto; apply refine_in_range with m; auto).
    rewrite Hg. apply refine_local; auto.
Qed.

(** **End to end, as [verishard.plan(..., exchange=True)] returns it**
    (what the sharded butterfly layer of [verishard.butterfly] runs): on
    every such problem the planner answers ([Exchangeproof.eplan_spec]);
    its plan of collectives is the pipeline's, of which
    [along_then_pipeline] holds; where it returns the exchange, every device
    assembling its schedule from what the devices computed gets its [dst]
    block of [f] applied to the global array. *)
Theorem along_then_eplan : forall V W (f : list nat -> list V -> nat -> W) (A : list nat -> V) m t src dst d,
  along_ok t src d -> valid_problem m src dst ->
  exists out, eplan_problem m src dst = Ok out /\
  match out with
  | Collectives fs p r => plan_problem m src dst = Ok (fs, p, r)
  | Exchanged _ _ =>
      exists pss, exchange m src dst = Some pss /\
      forall j i, j < ndevices m -> in_range m dst i ->
      assemble (fun r => along_local f d m t src (coords_of_rank m r) (local A m t (coords_of_rank m r)))
        (sdims m src) (tbox m dst (coords_of_rank m j)) (nth j pss []) i
      = Some (local (along f d (gsize (nth d t dflt)) A) m dst (coords_of_rank m j) i)
  end.
Proof.
  intros V W f A m t src dst d Hok Hv.
  destruct (eplan_spec m src dst Hv) as [out [He Hcase]]. exists out. split; [exact He|].
  destruct out as [fs p r|och rx]; [exact Hcase|].
  destruct Hcase as [ch [fs [p [r [pss [_ [_ [Hx _]]]]]]]].
  exists pss. split; [exact Hx|]. intros j i Hj Hi. apply along_then_exchange; auto.
Qed.
