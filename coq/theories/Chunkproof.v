(** Proofs about chunked execution ([Chunk.v]): every step decomposes into
    pieces along any local dimension, and the memory a chunked step holds. *)
From Coq Require Import List Arith Lia.
From VS Require Import Prelude Mesh Types Rules Permute Semantics Chunk.
Import ListNotations.

Lemma lsize_nth_pos : forall m t ch, wf m t -> 0 < lsize m (nth ch t dflt).
Proof.
  intros m t ch Ht. destruct (Nat.lt_ge_cases ch (length t)) as [Hl|Hl].
  - apply lsize_pos; [apply Ht|]. eapply wf_nth; [exact Ht|]. apply nth_error_nth'; auto.
  - rewrite nth_overflow by auto. unfold lsize. simpl. lia.
Qed.

(** What a step does to dimension [ch]: nothing (same local size, the
    source keeps the index), multiply it by [N] (a gather or an all-to-all
    into [ch]: the source reads the index modulo the input size), or divide
    it by [N] (a slice or an all-to-all out of [ch]: the source reads the
    index plus a multiple of the output size). *)
Lemma chunk_cases : forall m t op t' ch c i,
  wf m t -> step m t op t' -> in_range m t' i ->
  let lin := lsize m (nth ch t dflt) in
  let lout := lsize m (nth ch t' dflt) in
  let j := nth ch (snd (source m t op t' c i)) 0 in
  (lout = lin /\ j = nth ch i 0) \/
  (exists N, 0 < N /\ lout = lin * N /\ j = nth ch i 0 mod lin) \/
  (exists N q, 0 < N /\ lin = lout * N /\ j = q * lout + nth ch i 0).
Proof.
  intros m t op t' ch c i Ht Hs Hi lin lout j.
  assert (Hm : wf_mesh m) by apply Ht.
  assert (Hlen : length i = length t').
  { apply in_range_iff in Hi. tauto. }
  subst lin lout j.
  destruct Hs as [d xs P g HD Hxs | d xs D HD Hxs HxL Hnd Hnu [z Hz]
                 | d e xs P g E Hde HD HE Hxs [z Hz] | t'' Ht'' Hg Hl].
  - (* gather *)
    rewrite set_nth_length in Hlen.
    assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
    assert (HwD : wf_dim m (mkdim (P ++ xs) g)) by (eapply wf_nth; eauto).
    unfold source; simpl snd. rewrite HnD.
    destruct (Nat.eq_dec ch d) as [->|Hne].
    + right; left. exists (nprod m xs). split; [|split].
      * apply nprod_pos; auto. intros a Ha. destruct HwD as [_ [HA _]]. apply HA. simpl. apply in_or_app; auto.
      * rewrite nth_set_nth_eq by auto. rewrite HnD. apply lsize_prefix; auto.
      * rewrite nth_set_nth_eq by lia. rewrite HnD. auto.
    + left. rewrite !nth_set_nth_neq by auto. auto.
  - (* slice *)
    rewrite set_nth_length in Hlen.
    assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    assert (HnD : nth d t dflt = D) by (apply nth_error_nth; auto).
    assert (HwD : wf_dim m D) by (eapply wf_nth; eauto).
    assert (E' : lsize m (mkdim (axes D ++ xs) (gsize D)) = z) by (apply lsize_extend; auto).
    unfold source; simpl snd.
    destruct (Nat.eq_dec ch d) as [->|Hne].
    + right; right. exists (nprod m xs), (mr m xs c). split; [|split].
      * apply nprod_pos; auto.
      * rewrite nth_set_nth_eq by auto. rewrite HnD, E'. lia.
      * rewrite nth_set_nth_eq by lia. rewrite nth_set_nth_eq by auto. rewrite E'. auto.
    + left. rewrite !nth_set_nth_neq by auto. auto.
  - (* all-to-all *)
    rewrite !set_nth_length in Hlen.
    assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    assert (Hel : e < length t) by (apply nth_error_Some; congruence).
    assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
    assert (HnE : nth e t dflt = E) by (apply nth_error_nth; auto).
    assert (HwD : wf_dim m (mkdim (P ++ xs) g)) by (eapply wf_nth; eauto).
    assert (HwE : wf_dim m E) by (eapply wf_nth; eauto).
    assert (HxL : forall a, In a xs -> a < length m).
    { intros a Ha. destruct HwD as [_ [HA _]]. apply HA. simpl. apply in_or_app; auto. }
    assert (EE' : lsize m (mkdim (axes E ++ xs) (gsize E)) = z) by (apply lsize_extend; auto).
    set (t2 := set_nth (set_nth t d (mkdim P g)) e (mkdim (axes E ++ xs) (gsize E))).
    assert (Ht'd : nth d t2 dflt = mkdim P g).
    { unfold t2. rewrite nth_set_nth_neq by auto. apply nth_set_nth_eq; auto. }
    assert (Ht'e : nth e t2 dflt = mkdim (axes E ++ xs) (gsize E)).
    { unfold t2. apply nth_set_nth_eq. rewrite set_nth_length. auto. }
    unfold source; simpl snd. fold t2. rewrite HnD, Ht'e.
    destruct (Nat.eq_dec ch d) as [->|Hne].
    + right; left. exists (nprod m xs). split; [|split].
      * apply nprod_pos; auto.
      * rewrite Ht'd, HnD. apply lsize_prefix; auto.
      * rewrite nth_set_nth_neq by auto. rewrite nth_set_nth_eq by lia. rewrite HnD. auto.
    + destruct (Nat.eq_dec ch e) as [->|Hne'].
      * right; right. exists (nprod m xs), (mr m xs c). split; [|split].
        -- apply nprod_pos; auto.
        -- rewrite Ht'e, HnE, EE'. lia.
        -- rewrite nth_set_nth_eq by (rewrite set_nth_length; lia). rewrite Ht'e. auto.
      * left. unfold t2. rewrite !nth_set_nth_neq by auto. auto.
  - (* permute *)
    left. unfold source; simpl snd. split; auto.
    assert (H := f_equal (fun l => nth ch l (lsize m dflt)) Hl). simpl in H.
    rewrite !map_nth in H. auto.
Qed.

(** The chunk range divides both local sizes of [ch]: the input has
    [lsize t / R] groups of [R] positions along [ch], the output
    [lsize t' / R]. *)
Theorem chunk_range_divides : forall m t op t' ch,
  wf m t -> step m t op t' ->
  0 < chunk_range m t t' ch /\
  Nat.divide (chunk_range m t t' ch) (lsize m (nth ch t dflt)) /\
  Nat.divide (chunk_range m t t' ch) (lsize m (nth ch t' dflt)).
Proof.
  intros m t op t' ch Ht Hs.
  assert (Ht' : wf m t') by (eapply step_wf; eauto).
  assert (P1 := lsize_nth_pos m t ch Ht). assert (P2 := lsize_nth_pos m t' ch Ht').
  (* any in-range index will do to read off the case: the all-zero one *)
  set (i0 := repeat 0 (length t')).
  assert (Hi0 : in_range m t' i0).
  { apply in_range_iff. unfold i0. rewrite repeat_length. split; auto.
    intros j Hj. rewrite nth_repeat. apply lsize_nth_pos; auto. }
  destruct (chunk_cases m t op t' ch (fun _ => 0) i0 Ht Hs Hi0)
    as [[E _]|[[N [HN [E _]]]|[N [q [HN [E _]]]]]]; unfold chunk_range; rewrite E.
  - rewrite Nat.min_id. split; [auto|split; apply Nat.divide_refl].
  - rewrite Nat.min_l by nia. split; [auto|split; [apply Nat.divide_refl|exists N; ring]].
  - rewrite Nat.min_r by nia. split; [auto|split; [exists N; ring|apply Nat.divide_refl]].
Qed.

(** The decomposition lemma, for every collective and any chunk dimension:
    the input position [Semantics.source] reads has the chunk coordinate of
    the output position it is written to. *)
Theorem chunk_source_coord : forall m t op t' ch c i,
  wf m t -> step m t op t' -> in_range m t' i ->
  let R := chunk_range m t t' ch in
  ccoord R ch (snd (source m t op t' c i)) = ccoord R ch i.
Proof.
  intros m t op t' ch c i Ht Hs Hi R. unfold ccoord.
  assert (Ht' : wf m t') by (eapply step_wf; eauto).
  assert (P1 := lsize_nth_pos m t ch Ht). assert (P2 := lsize_nth_pos m t' ch Ht').
  destruct (chunk_cases m t op t' ch c i Ht Hs Hi)
    as [[E J]|[[N [HN [E J]]]|[N [q [HN [E J]]]]]]; rewrite J; subst R; unfold chunk_range; rewrite E.
  - auto.
  - rewrite Nat.min_l by nia. apply Nat.mod_mod. lia.
  - rewrite Nat.min_r by nia. rewrite Nat.add_comm, Nat.mod_add by lia. auto.
Qed.

(** Piece [p] is the interval [[p * w, p * w + w)] of chunk coordinates, [w = R / k]. *)
Theorem piece_interval : forall R k r p,
  0 < k -> Nat.divide k R -> 0 < R ->
  piece R k r = p <-> p * (R / k) <= r < p * (R / k) + R / k.
Proof.
  intros R k r p Hk [w Hw] HR. unfold piece. subst R.
  rewrite Nat.div_mul by lia. assert (Hw0 : 0 < w) by nia.
  split.
  - intros <-. pose proof (Nat.div_mod r w ltac:(lia)). pose proof (Nat.mod_upper_bound r w ltac:(lia)). nia.
  - intros H. symmetry. apply Nat.div_unique with (r := r - p * w); lia.
Qed.

(** Every output position of every device is written by exactly one piece
    [p < k], with the element [Semantics.source] gives, read from an input
    position of the same piece. *)
Theorem chunk_decompose : forall m t op t' ch k c i,
  wf m t -> step m t op t' -> in_range m t' i -> 0 < k -> Nat.divide k (chunk_range m t t' ch) ->
  exists p, p < k /\
    chunk_source m t op t' ch k p c i = Some (source m t op t' c i) /\
    (forall p', chunk_source m t op t' ch k p' c i <> None -> p' = p) /\
    piece_of m t t' ch k (snd (source m t op t' c i)) = p.
Proof.
  intros m t op t' ch k c i Ht Hs Hi Hk Hdk.
  destruct (chunk_range_divides m t op t' ch Ht Hs) as [HR _].
  set (R := chunk_range m t t' ch) in *.
  exists (piece_of m t t' ch k i). split; [|split; [|split]].
  - unfold piece_of, piece. fold R.
    assert (Hc : ccoord R ch i < R) by (apply Nat.mod_upper_bound; lia).
    destruct Hdk as [w Hw]. assert (Hw0 : 0 < w) by nia.
    replace (R / k) with w by (rewrite Hw, Nat.div_mul by lia; auto).
    apply Nat.div_lt_upper_bound; lia.
  - unfold chunk_source. rewrite Nat.eqb_refl. auto.
  - intros p' H. unfold chunk_source in H. destruct (Nat.eqb_spec (piece_of m t t' ch k i) p'); congruence.
  - unfold piece_of. fold R. f_equal. apply (chunk_source_coord m t op t' ch c i Ht Hs Hi).
Qed.

(** Memory: while piece [p] runs the step holds at most the larger of its
    input and output plus the smaller of one input and one output piece. *)
Theorem held_bound : forall k a b p, p < k ->
  held k a b p <= Nat.max (k * a) (k * b) + Nat.min a b.
Proof.
  intros k a b p Hp. unfold held.
  destruct (Nat.le_ge_cases a b) as [Hab|Hab].
  - rewrite Nat.min_l by auto. assert (k * a <= k * b) by nia. rewrite Nat.max_r by auto. nia.
  - rewrite Nat.min_r by auto. assert (k * b <= k * a) by nia. rewrite Nat.max_l by auto. nia.
Qed.

(** With pieces of [sin / k] and [sout / k] elements (equal pieces), a
    chunked step never holds more than [bound + bound / k] for any [bound]
    at least both sizes (the plan's type-level peak). *)
Theorem held_refined : forall k sin sout bound p,
  0 < k -> Nat.divide k sin -> Nat.divide k sout -> sin <= bound -> sout <= bound -> p < k ->
  held k (sin / k) (sout / k) p <= Nat.max sin sout + Nat.min sin sout / k /\
  held k (sin / k) (sout / k) p <= bound + bound / k.
Proof.
  intros k sin sout bound p Hk [a Ha] [b Hb] H1 H2 Hp. subst sin sout.
  rewrite !Nat.div_mul by lia.
  assert (Hmin : Nat.min (a * k) (b * k) / k = Nat.min a b).
  { rewrite Nat.mul_min_distr_r. apply Nat.div_mul. lia. }
  assert (Hb1 := held_bound k a b p Hp).
  replace (k * a) with (a * k) in Hb1 by ring. replace (k * b) with (b * k) in Hb1 by ring.
  split.
  - rewrite Hmin. auto.
  - assert (Nat.min a b <= bound / k).
    { apply Nat.div_le_lower_bound; [lia|]. destruct (Nat.le_ge_cases a b);
        [rewrite Nat.min_l by auto|rewrite Nat.min_r by auto]; nia. }
    assert (Nat.max (a * k) (b * k) <= bound) by (apply Nat.max_lub; auto). lia.
Qed.
