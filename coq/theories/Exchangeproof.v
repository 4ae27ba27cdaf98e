(** Proofs for [Exchange.v]: the exchange moves the data (every device ends
    with its target block of any global array), every device receives
    exactly what it needs, so the worst device receives the transfer lower
    bound and no plan receives less; along a free dimension its pieces read
    only their own piece of the input; the checker accepts exactly what it
    should; and the planner's choice keeps [plan_spec]'s plan or takes an
    exchange that receives strictly less. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Traffic Trafficproof Validate Pipelineproof
  Refine Pipeline Uneven Unevenproof Crossmesh Crossmeshproof Exchange.
Import ListNotations.

(** * The schedule on one mesh *)

Lemma nth_ranks : forall m i, i < ndevices m -> nth i (ranks m) 0 = i.
Proof. intros. unfold ranks. rewrite seq_nth; auto. Qed.

Lemma srcs_ranks : forall m t,
  srcs m (ranks m) t = map (fun i => (i, blocks m t (coords_of_rank m i))) (ranks m).
Proof.
  intros m t. unfold srcs, ranks. apply map_ext_in. intros i Hi. apply in_seq in Hi.
  rewrite seq_nth by lia. reflexivity.
Qed.

Lemma find_ranked : forall (f : nat -> list nat) len a j, a <= j < a + len ->
  find (fun s => fst s =? j) (map (fun i => (i, f i)) (seq a len)) = Some (j, f j).
Proof.
  intros f len. induction len as [|len IH]; intros a j Hj; [lia|]. simpl.
  destruct (a =? j) eqn:E.
  - apply Nat.eqb_eq in E. subst. reflexivity.
  - apply Nat.eqb_neq in E. apply IH. lia.
Qed.

Lemma vol_tbox : forall m t c, wf m t -> valid m c -> vol (tbox m t c) = size m t.
Proof.
  intros m t c [Hm [Hd _]] Hc. unfold vol, tbox, size. rewrite map_map. cbn [snd].
  f_equal. apply map_ext_in. intros D HD. apply uvlen_lsize; auto.
  rewrite Forall_forall in Hd. auto.
Qed.

(** What a device holds of its target block is [Traffic.kept]. *)
Lemma owned_kept : forall m t t' c, wf m t -> wf m t' -> valid m c -> length t = length t' ->
  vol (owned (sdims m t) (blocks m t c) (tbox m t' c)) = kept m t t' c.
Proof.
  intros m t t' c [Hm [Hd _]] [_ [Hd' _]] Hc. revert t' Hd'.
  induction t as [|D t IH]; intros [|D' t'] Hd' Hl; simpl in Hl; try discriminate; [reflexivity|].
  inversion Hd as [|? ? HD Ht]; subst. inversion Hd' as [|? ? HD' Ht']; subst.
  unfold kept, vol, sdims, blocks, tbox in *. simpl. rewrite (IH Ht t' Ht') by lia.
  f_equal. unfold isect, overlap. simpl.
  rewrite (ucsize_lsize m D), (ugidx_gidx m D'), (uvlen_lsize m D') by auto.
  unfold gidx. cbn [fst snd]. rewrite !Nat.add_0_r. f_equal. f_equal. lia.
Qed.

Lemma held_kept : forall m t t' j, wf m t -> wf m t' -> length t = length t' -> j < ndevices m ->
  held (sdims m t) (srcs m (ranks m) t) j (tbox m t' (coords_of_rank m j)) = kept m t t' (coords_of_rank m j).
Proof.
  intros m t t' j Ht Ht' Hl Hj. unfold held. rewrite srcs_ranks. unfold ranks.
  rewrite (find_ranked (fun i => blocks m t (coords_of_rank m i))) by lia. cbn [snd].
  apply owned_kept; auto. apply coords_of_rank_valid. apply Ht.
Qed.

Lemma gsize_length : forall t t' : atype, map gsize t = map gsize t' -> length t = length t'.
Proof. intros t t' H. rewrite <- (map_length gsize t), <- (map_length gsize t'), H. reflexivity. Qed.

(** The schedule of device [j] of an exchange: every element of its block
    arrives from a device holding it, at its global index; it receives from
    the others exactly [need]: its block less what it holds. *)
Lemma exchange_device : forall m t t' pss, exchange m t t' = Some pss -> valid_problem m t t' ->
  length pss = ndevices m /\
  forall j, j < ndevices m ->
    (forall V (A : list nat -> V) i, in_range m t' i ->
       assemble (fun r => local A m t (coords_of_rank m r)) (sdims m t) (tbox m t' (coords_of_rank m j))
         (nth j pss []) i = Some (local A m t' (coords_of_rank m j) i)) /\
    (forall q, In q (nth j pss []) -> exists i, i < ndevices m /\ psrc q = i /\
       pcell q = blocks m t (coords_of_rank m i)) /\
    Crossmesh.traffic j (nth j pss []) = need m t t' (coords_of_rank m j).
Proof.
  intros m t t' pss H [Ht [Ht' Hg]]. pose proof (gsize_length _ _ Hg) as Hl.
  assert (Hm : wf_mesh m) by apply Ht.
  destruct (xplan_correct _ _ _ _ _ _ _ H) as [Hlen Hn]. split; [exact Hlen|].
  intros j Hj. destruct (Hn j Hj) as [ps [E [Hdata [_ [Hsrc [_ Htr]]]]]].
  rewrite (nth_error_nth _ _ [] E). split; [|split].
  - intros V A i Hi.
    rewrite (Hdata V A (fun r => local A m t (coords_of_rank m r))).
    + unfold local. rewrite ugindex_gindex; auto.
    + intros i' Hi' k. rewrite nth_ranks by auto. unfold local. rewrite ugindex_gindex; auto.
    + apply uvalid_pos_even; auto. apply coords_of_rank_valid; auto.
  - intros q Hq. destruct (Hsrc q Hq) as [Hin _]. rewrite srcs_ranks in Hin.
    apply in_map_iff in Hin. destruct Hin as [i [Ei Hi]]. injection Ei as E1 E2.
    unfold ranks in Hi. apply in_seq in Hi. exists i. split; [lia|]. auto.
  - rewrite nth_ranks in Htr by auto. rewrite Htr, held_kept, vol_tbox by auto using coords_of_rank_valid.
    reflexivity.
Qed.

(** **Data**: with every device holding its [t] block of a global array,
    every device assembles from its schedule exactly its [t'] block. *)
Theorem exchange_correct : forall m t t' pss, exchange m t t' = Some pss -> valid_problem m t t' ->
  forall V (A : list nat -> V) j i, j < ndevices m -> in_range m t' i ->
  assemble (fun r => local A m t (coords_of_rank m r)) (sdims m t) (tbox m t' (coords_of_rank m j))
    (nth j pss []) i = Some (local A m t' (coords_of_rank m j) i).
Proof.
  intros m t t' pss H Hv V A j i Hj Hi. destruct (exchange_device _ _ _ _ H Hv) as [_ Hd].
  apply (Hd j Hj). auto.
Qed.

(** **Traffic**: the worst device receives the lower bound, which no plan
    of collectives the checker accepts goes below
    ([Trafficproof.accepted_traffic_lower_bound]). *)
Theorem exchange_lower_bound : forall m t t' pss, exchange m t t' = Some pss -> valid_problem m t t' ->
  exchange_recv m pss = lower_bound m t t' /\
  forall j, j < ndevices m -> Crossmesh.traffic j (nth j pss []) = need m t t' (coords_of_rank m j).
Proof.
  intros m t t' pss H Hv. destruct (exchange_device _ _ _ _ H Hv) as [_ Hd].
  split.
  - unfold exchange_recv, lower_bound, ranks. f_equal. apply map_ext_in. intros j Hj.
    apply in_seq in Hj. apply Hd. lia.
  - intros j Hj. apply Hd; auto.
Qed.

(** * Pieces along a free dimension *)

Lemma cellbox_length : forall sd ks, length (cellbox sd ks) = Nat.min (length sd) (length ks).
Proof. induction sd; intros [|k ks]; simpl; auto. Qed.

Lemma cellbox_start : forall sd ks ch, fst (nth ch (cellbox sd ks) (0, 0)) = nth ch ks 0 * fst (nth ch sd (0, 0)).
Proof.
  induction sd as [|cn sd IH]; intros [|k ks] [|ch]; simpl; auto; try lia.
Qed.

(** Along a dimension where [B] starts at 0 the offset within [B] is the
    global index itself. *)
Lemma unshift_start0 : forall B p ch, fst (nth ch B (0, 0)) = 0 ->
  nth ch (unshift B p) 0 = if ch <? length B then nth ch p 0 else 0.
Proof.
  induction B as [|iv B IH]; intros p ch H.
  - destruct p, ch; reflexivity.
  - destruct p as [|x p].
    + destruct ch as [|ch]; simpl; [reflexivity|]. destruct (S ch <? S (length B)); reflexivity.
    + destruct ch as [|ch]; simpl in H |- *.
      * rewrite H. lia.
      * rewrite IH by auto. reflexivity.
Qed.

Lemma free_from_spec : forall t t' d ch, free_from d t t' = Some ch ->
  d <= ch /\ exists D D', nth_error t (ch - d) = Some D /\ nth_error t' (ch - d) = Some D' /\
    axes D = [] /\ axes D' = [] /\ 2 <= gsize D.
Proof.
  induction t as [|D t IH]; intros [|D' t'] d ch H; cbn [free_from] in H; try discriminate.
  destruct (axes D) as [|a A] eqn:E1; [destruct (axes D') as [|a' A'] eqn:E2|].
  - destruct (2 <=? gsize D) eqn:E3.
    + injection H as <-. split; auto. exists D, D'. rewrite Nat.sub_diag. simpl.
      apply Nat.leb_le in E3. auto.
    + destruct (IH _ _ _ H) as [Hle [D0 [D0' HH]]]. split; [lia|]. exists D0, D0'.
      replace (ch - d) with (S (ch - S d)) by lia. exact HH.
  - destruct (IH _ _ _ H) as [Hle [D0 [D0' HH]]]. split; [lia|]. exists D0, D0'.
    replace (ch - d) with (S (ch - S d)) by lia. exact HH.
  - destruct (IH _ _ _ H) as [Hle [D0 [D0' HH]]]. split; [lia|]. exists D0, D0'.
    replace (ch - d) with (S (ch - S d)) by lia. exact HH.
Qed.

Theorem free_dim_spec : forall t t' ch, free_dim t t' = Some ch ->
  exists D D', nth_error t ch = Some D /\ nth_error t' ch = Some D' /\
    axes D = [] /\ axes D' = [] /\ 2 <= gsize D.
Proof.
  intros t t' ch H. destruct (free_from_spec _ _ _ _ H) as [_ HH]. rewrite Nat.sub_0_r in HH. exact HH.
Qed.

(** **Pieces**: along a dimension [ch] that neither type shards, every
    element a device receives is read from its sender's block at the same
    coordinate along [ch] as it is written in the receiver's block. So the
    exchange splits into pieces by that coordinate, piece [p] of the output
    reading only piece [p] of the input, and the chunked schedule holds
    what [Chunk.held] counts ([Chunkproof.held_bound]). *)
Theorem exchange_chunk : forall m t t' pss ch D D', exchange m t t' = Some pss -> valid_problem m t t' ->
  nth_error t ch = Some D -> axes D = [] -> nth_error t' ch = Some D' -> axes D' = [] ->
  forall j q p, j < ndevices m -> In q (nth j pss []) ->
  nth ch (unshift (cellbox (sdims m t) (pcell q)) p) 0
  = nth ch (unshift (tbox m t' (coords_of_rank m j)) p) 0.
Proof.
  intros m t t' pss ch D D' H Hv E1 A1 E2 A2 j q p Hj Hq.
  pose proof Hv as [_ [_ Hg]]. pose proof (gsize_length _ _ Hg) as Hl.
  destruct (exchange_device _ _ _ _ H Hv) as [_ Hd]. destruct (Hd j Hj) as [_ [Hs _]].
  destruct (Hs q Hq) as [i [_ [_ Ec]]].
  rewrite !unshift_start0.
  - rewrite cellbox_length, Ec. unfold sdims, blocks, tbox. rewrite !map_length, Hl, Nat.min_id. reflexivity.
  - unfold tbox. rewrite (nth_error_nth _ _ (0, 0) (map_nth_error _ _ _ E2)). cbn [fst].
    unfold ugidx, block. rewrite A2. reflexivity.
  - rewrite cellbox_start, Ec. unfold blocks.
    rewrite (nth_error_nth _ _ 0 (map_nth_error _ _ _ E1)). unfold block. rewrite A1. reflexivity.
Qed.

(** * The checker *)

Lemma problem_error_none : forall m src dst, valid_problem m src dst -> problem_error m src dst = None.
Proof.
  intros m src dst [Hs [Hd Hg]]. unfold problem_error.
  assert (Hm : wf_meshb m = true) by (apply wf_meshb_spec, Hs).
  apply wfb_spec in Hs, Hd. apply nat_list_eqb_spec in Hg. rewrite Hm, Hs, Hd, Hg. reflexivity.
Qed.

Lemma problem_error_spec : forall m src dst, problem_error m src dst = None -> valid_problem m src dst.
Proof.
  intros m src dst H. unfold problem_error in H.
  destruct (wf_meshb m); [|discriminate]. destruct (wfb m src) eqn:Hs; [|discriminate].
  destruct (wfb m dst) eqn:Hd; [|discriminate].
  destruct (nat_list_eqb (map gsize src) (map gsize dst)) eqn:Hg; [|discriminate].
  apply wfb_spec in Hs, Hd. apply nat_list_eqb_spec in Hg. split; auto.
Qed.

Lemma peak_pair : forall m src dst, peak_of m [src; dst] = bound m src dst.
Proof. intros. unfold peak_of, bound. simpl. lia. Qed.

(** What the checker accepts: a plan of collectives that [Checker.check]
    accepts, with its report; or the one-step exchange to the target of a
    valid problem, with the peak [bound src dst] and the lower bound as what
    the worst device receives. *)
Theorem echeck_spec : forall m src dst p r, echeck m src dst p = Ok r ->
  (exists cs, colls p = Some cs /\ check m src dst cs = Ok r) \/
  (p = [Exch dst] /\ valid_problem m src dst /\ exists pss, exchange m src dst = Some pss /\
     r = mkreport [src; dst] (bound m src dst) [lower_bound m src dst]).
Proof.
  intros m src dst p r H. unfold echeck in H.
  destruct p as [|[c|t'] [|s p]]; try (left; destruct (colls _) as [cs|] eqn:E; [exists cs; split; auto|discriminate]; fail).
  - right. destruct (problem_error m src dst) eqn:Ep; [discriminate|].
    destruct (atype_eqb t' dst) eqn:Et; [|discriminate]. apply atype_eqb_spec in Et. subst t'.
    apply problem_error_spec in Ep.
    destruct (exchange m src dst) as [pss|] eqn:Ex; [|discriminate]. injection H as <-.
    split; auto. split; auto. exists pss. split; auto.
    f_equal; [apply peak_pair|f_equal; apply exchange_lower_bound; auto].
Qed.

Theorem echeck_exchange : forall m src dst pss, valid_problem m src dst -> exchange m src dst = Some pss ->
  echeck m src dst [Exch dst] = Ok (mkreport [src; dst] (bound m src dst) [lower_bound m src dst]).
Proof.
  intros m src dst pss Hv Hx. unfold echeck. rewrite problem_error_none by auto.
  replace (atype_eqb dst dst) with true by (symmetry; apply atype_eqb_spec; auto).
  rewrite Hx. f_equal. f_equal; [apply peak_pair|f_equal; apply exchange_lower_bound; auto].
Qed.

(** * The planner *)

(** **End to end**: on every valid problem the planner answers; either with
    [Pipeline.plan_problem]'s plan (so [Pipelineproof.plan_spec] holds of
    it), or with the exchange, taken only when it receives strictly less than
    that plan and a free dimension [ch] lets it run in pieces; then the
    checker accepts it with the peak [bound src dst] and the lower bound as
    what the worst device receives, and every device assembles its target
    block of any global array. *)
Theorem eplan_spec : forall m src dst, valid_problem m src dst ->
  exists out, eplan_problem m src dst = Ok out /\
  match out with
  | Collectives fs p r => plan_problem m src dst = Ok (fs, p, r)
  | Exchanged ch rx =>
      exists fs p r pss, plan_problem m src dst = Ok (fs, p, r) /\ exchange m src dst = Some pss /\
      rx = lower_bound m src dst /\ rx < Traffic.traffic (received r) /\
      echeck m src dst [Exch dst] = Ok (mkreport [src; dst] (bound m src dst) [rx]) /\
      (exists D D', nth_error src ch = Some D /\ nth_error dst ch = Some D' /\
         axes D = [] /\ axes D' = [] /\ 2 <= gsize D) /\
      (forall V (A : list nat -> V) j i, j < ndevices m -> in_range m dst i ->
         assemble (fun r => local A m src (coords_of_rank m r)) (sdims m src)
           (tbox m dst (coords_of_rank m j)) (nth j pss []) i = Some (local A m dst (coords_of_rank m j) i))
  end.
Proof.
  intros m src dst Hv. destruct (plan_spec m src dst Hv) as [fs [p [r [Hpp _]]]].
  unfold eplan_problem. rewrite Hpp.
  destruct (free_dim src dst) as [ch|] eqn:Ef; [|eexists; split; [reflexivity|reflexivity]].
  destruct (exchange m src dst) as [pss|] eqn:Ex; [|eexists; split; [reflexivity|reflexivity]].
  destruct (exchange_recv m pss <? Traffic.traffic (received r)) eqn:Elt;
    [|eexists; split; [reflexivity|reflexivity]].
  eexists. split; [reflexivity|]. cbn beta iota.
  destruct (exchange_lower_bound _ _ _ _ Ex Hv) as [Hlb _].
  exists fs, p, r, pss. apply Nat.ltb_lt in Elt.
  split; auto. split; auto. split; auto. split; [lia|]. split.
  - rewrite Hlb. apply echeck_exchange with pss; auto.
  - split; [apply free_dim_spec; auto|]. intros. apply exchange_correct; auto.
Qed.
