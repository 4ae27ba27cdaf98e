(** The tables the runtimes read from the core, entry by entry: where each
    device's block starts ([Types.block_starts]: [block_starts_spec]), and
    where each position of a step's output is read from, on even blocks
    ([Semantics.movement], the table of [Semantics.source]:
    [movement_spec]) and on padded blocks ([Uchecker.umovement], of
    [Uchecker.usrc]: [umovement_spec]). Positions are numbered row-major
    ([Semantics.offset] over [Semantics.row_major]). Proofs only. *)
From Coq Require Import List Arith Lia.
From VS Require Import Prelude Mesh Types Rules Semantics Trafficproof Uneven Uchecker.
Import ListNotations.

(** A list of chunks of [w] elements each: entry [k * w + j] is entry [j]
    of chunk [k]. *)
Lemma nth_error_flat_map_chunks : forall A B (f : A -> list B) l w k j,
  (forall x, In x l -> length (f x) = w) -> j < w ->
  nth_error (flat_map f l) (k * w + j) = match nth_error l k with Some x => nth_error (f x) j | None => None end.
Proof.
  intros A B f l w. induction l as [|x l IH]; intros k j Hw Hj.
  - cbn [flat_map]. assert (E : forall C n, nth_error (@nil C) n = None) by (intros C n; destruct n; reflexivity).
    rewrite !E. reflexivity.
  - cbn [flat_map]. assert (Hx : length (f x) = w) by (apply Hw; left; reflexivity).
    destruct k as [|k].
    + cbn. rewrite nth_error_app1 by lia. reflexivity.
    + rewrite nth_error_app2 by (rewrite Hx; cbn; lia). rewrite Hx.
      replace (S k * w + j - w) with (k * w + j) by (cbn; lia).
      cbn [nth_error]. apply IH; auto. intros y Hy. apply Hw. right. exact Hy.
Qed.

Lemma flat_map_chunks_length : forall A B (f : A -> list B) l w,
  (forall x, In x l -> length (f x) = w) -> length (flat_map f l) = length l * w.
Proof.
  intros A B f l w Hw. induction l as [|x l IH]; cbn; auto.
  rewrite app_length, IH, (Hw x (or_introl eq_refl)) by (intros y Hy; apply Hw; right; exact Hy). lia.
Qed.

Lemma offset_lt : forall s i, Forall2 (fun n k => k < n) s i -> offset s i < prod s.
Proof.
  intros s i H. induction H as [|n k s i Hk H IH]; [cbn; lia|].
  change (k * prod s + offset s i < n * prod s).
  assert (S k * prod s <= n * prod s) by (apply Nat.mul_le_mono_r; lia). cbn [Nat.mul] in *. lia.
Qed.

(** Position [offset s i] of the row-major enumeration is [i]. *)
Lemma row_major_offset : forall s i, Forall2 (fun n k => k < n) s i -> nth_error (row_major s) (offset s i) = Some i.
Proof.
  intros s i H. induction H as [|n k s i Hk H IH]; [reflexivity|].
  cbn [row_major offset].
  rewrite (nth_error_flat_map_chunks _ _ (fun k0 => map (cons k0) (row_major s)) (seq 0 n) (prod s) k (offset s i)).
  - rewrite nth_error_seq0 by exact Hk. rewrite nth_error_map, IH. reflexivity.
  - intros x _. rewrite map_length. apply row_major_length.
  - apply offset_lt. exact H.
Qed.

(** **Block starts**: entry [r * length t + d] of [block_starts m t] is the
    global index where device [r]'s block starts in dimension [d]: its
    local index [k] there is global index [start + k] ([Types.gidx], of
    which [Semantics.gindex] is made). *)
Theorem block_starts_spec : forall m t r d D, r < ndevices m -> nth_error t d = Some D ->
  length (block_starts m t) = ndevices m * length t /\
  exists s, nth_error (block_starts m t) (r * length t + d) = Some s /\
    forall k, gidx m D (coords_of_rank m r) k = s + k.
Proof.
  intros m t r d D Hr Hd. unfold block_starts.
  assert (Hw : forall x, In x (seq 0 (ndevices m)) ->
                 length (map (fun D => gidx m D (coords_of_rank m x) 0) t) = length t)
    by (intros; apply map_length).
  split; [rewrite (flat_map_chunks_length _ _ _ _ _ Hw), seq_length; reflexivity|].
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  rewrite (nth_error_flat_map_chunks _ _ _ _ _ r d Hw Hdl), nth_error_seq0 by exact Hr.
  rewrite nth_error_map, Hd. eexists. split; [reflexivity|]. intro k. unfold gidx. lia.
Qed.

(** **The movement table, even blocks**: for device [r] and position [i] of
    its output block under [t'] (row-major number [o]), entries [2 (r P + o)]
    and [2 (r P + o) + 1] ([P] the block's size) are the rank and the
    row-major input position [Semantics.source] reads it from. *)
Theorem movement_spec : forall m t op t' r i, r < ndevices m ->
  Forall2 (fun n k => k < n) (map (lsize m) t') i ->
  length (movement m t op t') = ndevices m * (2 * prod (map (lsize m) t')) /\
  nth_error (movement m t op t') (2 * (r * prod (map (lsize m) t') + offset (map (lsize m) t') i))
    = Some (rank m (fst (source m t op t' (coords_of_rank m r) i))) /\
  nth_error (movement m t op t') (S (2 * (r * prod (map (lsize m) t') + offset (map (lsize m) t') i)))
    = Some (offset (map (lsize m) t) (snd (source m t op t' (coords_of_rank m r) i))).
Proof.
  intros m t op t' r i Hr Hi.
  set (s' := map (lsize m) t'). set (P := prod s').
  set (g := fun r i => let (c', i') := source m t op t' (coords_of_rank m r) i in
                       [rank m c'; offset (map (lsize m) t) i']).
  assert (Em : movement m t op t' = flat_map (fun r => flat_map (g r) (row_major s')) (seq 0 (ndevices m)))
    by reflexivity.
  rewrite Em.
  assert (Hg : forall r i, length (g r i) = 2) by (intros r0 i0; unfold g; destruct (source _ _ _ _ _ _); reflexivity).
  assert (Hw : forall x, In x (seq 0 (ndevices m)) -> length (flat_map (g x) (row_major s')) = 2 * P).
  { intros x _. rewrite (flat_map_chunks_length _ _ _ _ 2) by (intros; apply Hg).
    unfold P. rewrite row_major_length. lia. }
  pose proof (offset_lt s' i Hi) as Ho. fold P in Ho.
  split; [rewrite (flat_map_chunks_length _ _ _ _ _ Hw), seq_length; reflexivity|].
  replace (2 * (r * P + offset s' i)) with (r * (2 * P) + (offset s' i * 2 + 0)) by lia.
  replace (S (r * (2 * P) + (offset s' i * 2 + 0))) with (r * (2 * P) + (offset s' i * 2 + 1)) by lia.
  rewrite !(nth_error_flat_map_chunks _ _ _ _ _ r _ Hw) by lia. rewrite nth_error_seq0 by exact Hr.
  rewrite !(nth_error_flat_map_chunks _ _ _ _ 2 _ _ (fun x _ => Hg r x)) by lia.
  rewrite row_major_offset by exact Hi. unfold g. destruct (source _ _ _ _ _ _). split; reflexivity.
Qed.

(** **The movement table, padded blocks**: for device [r] and position [i]
    of its padded output buffer under [t'] (row-major number [o], [P] the
    buffer's size), entries [2 (r P + o)] and [2 (r P + o) + 1] are the
    rank and row-major padded input position [Uchecker.usrc] reads it from,
    or [ndevices m] and [0] where the step writes fresh padding. *)
Theorem umovement_spec : forall m t op t' r i, r < ndevices m ->
  Forall2 (fun n k => k < n) (map (ucsize m) t') i ->
  length (umovement m t op t') = ndevices m * (2 * prod (map (ucsize m) t')) /\
  nth_error (umovement m t op t') (2 * (r * prod (map (ucsize m) t') + offset (map (ucsize m) t') i))
    = Some (match usrc m t op t' (coords_of_rank m r) i with Some (c', _) => rank m c' | None => ndevices m end) /\
  nth_error (umovement m t op t') (S (2 * (r * prod (map (ucsize m) t') + offset (map (ucsize m) t') i)))
    = Some (match usrc m t op t' (coords_of_rank m r) i with
            | Some (_, i') => offset (map (ucsize m) t) i' | None => 0 end).
Proof.
  intros m t op t' r i Hr Hi.
  set (s' := map (ucsize m) t'). set (P := prod s').
  set (g := fun r i => match usrc m t op t' (coords_of_rank m r) i with
                       | Some (c', i') => [rank m c'; offset (map (ucsize m) t) i']
                       | None => [ndevices m; 0] end).
  assert (Em : umovement m t op t' = flat_map (fun r => flat_map (g r) (row_major s')) (seq 0 (ndevices m)))
    by reflexivity.
  rewrite Em.
  assert (Hg : forall r i, length (g r i) = 2)
    by (intros r0 i0; unfold g; destruct (usrc _ _ _ _ _ _) as [[? ?]|]; reflexivity).
  assert (Hw : forall x, In x (seq 0 (ndevices m)) -> length (flat_map (g x) (row_major s')) = 2 * P).
  { intros x _. rewrite (flat_map_chunks_length _ _ _ _ 2) by (intros; apply Hg).
    unfold P. rewrite row_major_length. lia. }
  pose proof (offset_lt s' i Hi) as Ho. fold P in Ho.
  split; [rewrite (flat_map_chunks_length _ _ _ _ _ Hw), seq_length; reflexivity|].
  replace (2 * (r * P + offset s' i)) with (r * (2 * P) + (offset s' i * 2 + 0)) by lia.
  replace (S (r * (2 * P) + (offset s' i * 2 + 0))) with (r * (2 * P) + (offset s' i * 2 + 1)) by lia.
  rewrite !(nth_error_flat_map_chunks _ _ _ _ _ r _ Hw) by lia. rewrite nth_error_seq0 by exact Hr.
  rewrite !(nth_error_flat_map_chunks _ _ _ _ 2 _ _ (fun x _ => Hg r x)) by lia.
  rewrite row_major_offset by exact Hi. unfold g. destruct (usrc _ _ _ _ _ _) as [[? ?]|]; split; reflexivity.
Qed.
